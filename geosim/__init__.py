"""geosim: predict, measure and choose parallel training techniques for geo-distributed GPU slices."""

__version__ = "0.1.0"


def _use_this_checkout() -> None:
    """In a source checkout, import geosim.live / geosim.calibrate / geosim.scenarios from the
    folders beside this geosim/ (pyproject's package-dir). An editable install maps them to the
    checkout it was made from, which is another tree when several checkouts (git worktrees)
    share one environment; a wheel has them inside geosim/ and never gets here."""
    import importlib.util
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(os.path.join(root, "pyproject.toml")):
        return
    parts = {f"geosim.{name}": os.path.join(root, folder) for name, folder in
             (("live", "live"), ("calibrate", "calibrate"), ("scenarios", "scenarios"))}

    class CheckoutParts:
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            folder = parts.get(fullname)
            init = folder and os.path.join(folder, "__init__.py")
            if not init or not os.path.isfile(init):
                return None
            return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[folder])

    if not any(type(f).__name__ == "CheckoutParts" or getattr(f, "__name__", "") == "CheckoutParts"
               for f in sys.meta_path):
        sys.meta_path.insert(0, CheckoutParts)


_use_this_checkout()

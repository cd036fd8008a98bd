"""geosim: predict, measure and choose parallel training techniques for geo-distributed GPU slices."""

import importlib.abc
import importlib.util
import sys
from pathlib import Path

__version__ = "0.1.0"


class _CheckoutParts(importlib.abc.MetaPathFinder):
    """From a checkout, geosim.calibrate and geosim.live are the checkout's calibrate/ and live/.

    An editable install maps them to the directories it was installed from; a second checkout
    (a git worktree) imported first on sys.path would otherwise run its own geosim/ against the
    other checkout's calibrate/ and live/."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        part = name.removeprefix("geosim.")
        if name.count(".") != 1 or part not in ("calibrate", "live") or not (self.root / part / "__init__.py").exists():
            return None
        return importlib.util.spec_from_file_location(name, self.root / part / "__init__.py",
                                                      submodule_search_locations=[str(self.root / part)])


_ROOT = Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").exists() and not any(isinstance(f, _CheckoutParts) for f in sys.meta_path):
    sys.meta_path.insert(0, _CheckoutParts(_ROOT))

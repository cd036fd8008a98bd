"""Tests run against this checkout's calibrate/ and live/, which install as geosim.calibrate and
geosim.live: without this, an editable install of another checkout would supply those two."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _alias(name: str, directory: Path) -> None:
    if not (directory / "__init__.py").is_file():
        return
    loaded = sys.modules.get(name)
    if loaded is not None and Path(loaded.__file__).resolve().parent == directory:
        return
    spec = importlib.util.spec_from_file_location(name, directory / "__init__.py",
                                                  submodule_search_locations=[str(directory)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_alias("geosim.calibrate", ROOT / "calibrate")
_alias("geosim.live", ROOT / "live")

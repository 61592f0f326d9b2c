import os

import pytest
import torch


def _library_problem():
    try:
        from attnc import _lib
        _lib.library()
    except Exception as error:  # the message says what is missing
        return str(error)
    return None


def _gpu_problem():
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"needs an sm_90 GPU, found sm_{major}{minor} ({torch.cuda.get_device_name()})"
    return _library_problem()


def pytest_collection_modifyitems(config, items):
    library = _library_problem()
    gpu = _gpu_problem()
    for item in items:
        if "gpu" in item.keywords and gpu:
            item.add_marker(pytest.mark.skip(reason=f"GPU test skipped: {gpu}"))
        elif "library" in item.keywords and library:
            item.add_marker(pytest.mark.skip(reason=f"needs libattnc_c.so: {library}"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: runs kernels on an sm_90 GPU")
    config.addinivalue_line("markers", "library: needs libattnc_c.so (compiles, no GPU)")
    # Compiled kernels go to a cache of the test run's own unless the caller
    # chose one.
    os.environ.setdefault("ATTNC_CACHE_DIR", os.path.join(str(config.rootpath), ".pytest_cache",
                                                          "attnc-kernels"))

"""Fixtures every TUI test gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _forget_finished_apps_render_caches() -> Iterator[None]:
    """Textual caches `StylesCache.get_inner_outer` with an lru_cache keyed by the widget's StylesCache,
    so up to 1,024 widgets' render caches (their drawn strips) outlive the app that drew them. One user's
    process draws one app; a worker of this suite draws a hundred, and the ~250,000 objects kept made each
    of the garbage collector's full passes slow (with gc.freeze in tests/conftest.py: ~20 s of CPU less
    over tests/tui). Emptied after each test, as a fresh process would have it; what is drawn is unchanged."""
    yield
    from textual._styles_cache import StylesCache

    cache_clear = getattr(StylesCache.get_inner_outer, "cache_clear", None)  # not in every Textual version
    if cache_clear is not None:
        cache_clear()

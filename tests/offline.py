"""What a page would load from another machine: every URL a browser fetches by itself when
it shows the page (scripts, stylesheets, images, frames, fonts, preconnects, CSS
``url()`` and ``@import``), that names a host other than the page's own. A link (``<a
href>``) loads nothing until it is followed, and is not counted.

Used on every page the gateway serves (``tests/test_offline.py``) and on every page of the
built docs site (``tests/test_docs.py``).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", ""})
# (tag, attribute) pairs a browser fetches by itself; <link> by its rel below
_LOADS = {
    ("script", "src"),
    ("img", "src"),
    ("img", "srcset"),
    ("iframe", "src"),
    ("frame", "src"),
    ("source", "src"),
    ("source", "srcset"),
    ("video", "src"),
    ("video", "poster"),
    ("audio", "src"),
    ("track", "src"),
    ("embed", "src"),
    ("object", "data"),
    ("input", "src"),
    ("image", "href"),
    ("use", "href"),
}
_LINK_LOADS = {"stylesheet", "icon", "shortcut", "preconnect", "preload", "prefetch"}
_LINK_LOADS |= {"modulepreload", "dns-prefetch", "manifest", "apple-touch-icon"}
_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)|@import\s+['"]([^'"]+)""", re.IGNORECASE)


def foreign(url: str, own: str = "") -> bool:
    """Whether ``url`` names a host other than ``own`` and this machine's."""
    url = url.strip()
    if not url.startswith(("http://", "https://", "//")):
        return False  # relative, data:, blob:, a fragment
    host = urlsplit(url if not url.startswith("//") else "http:" + url).hostname or ""
    return host not in LOCAL_HOSTS and host != own


def css_loads(css: str, own: str = "") -> list[str]:
    return [u for pair in _CSS_URL.findall(css) for u in pair if u and foreign(u, own)]


class _Loads(HTMLParser):
    def __init__(self, own: str):
        super().__init__(convert_charrefs=True)
        self.own = own
        self.found: list[str] = []
        self.mermaid = False
        self._style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): v or "" for k, v in attrs}
        rel = set(a.get("rel", "").lower().split())
        link = tag == "link" and bool(rel & _LINK_LOADS)
        for name, value in a.items():
            if (tag, name) not in _LOADS and not (link and name == "href"):
                continue
            urls = [u.split()[0] for u in value.split(",") if u.strip()]
            self.found += [
                u for u in (urls if "srcset" in name else [value]) if foreign(u, self.own)
            ]
        self.found += css_loads(a.get("style", ""), self.own)
        self.mermaid = self.mermaid or "mermaid" in a.get("class", "").split()
        self._style = tag == "style"

    def handle_data(self, data: str) -> None:
        if self._style:
            self.found += css_loads(data, self.own)

    def handle_endtag(self, tag: str) -> None:
        self._style = False


def html_loads(html: str, own: str = "") -> list[str]:
    """The foreign URLs ``html`` makes a browser load. A Mermaid block counts as one: the
    docs theme fetches Mermaid from a CDN to draw it."""
    p = _Loads(own)
    p.feed(html)
    return p.found + (["<a mermaid block: Mermaid from a CDN>"] if p.mermaid else [])


def stylesheets(html: str) -> list[str]:
    """The stylesheets ``html`` links (to scan them too)."""
    return re.findall(r"""<link[^>]+rel=["']?stylesheet["']?[^>]*href=["']([^"']+)""", html)

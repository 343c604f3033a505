"""The operator console: server-rendered pages on the admin listener (``/console``).

* ``app``      ``install(admin_app)``: the pages, their static files, the login redirect
* ``auth``     login and logout, the session and CSRF checks
* ``client``   the admin API, called in-process with the admin token, so every check,
  audit entry and error is the API's own
* ``render``   the templates, their filters, the pages' security headers
* ``tiers``, ``rules``, ``tenants``, ``records``  the pages; ``diff``: two rule versions

A browser logs in with the admin token once and then holds a signed session cookie
(:mod:`gateway.admin.session`); the JSON admin API keeps its Bearer token. No JavaScript
build: one small script (``static/console.js``) refreshes the live numbers.
"""

from gateway.console.app import install

__all__ = ("install",)

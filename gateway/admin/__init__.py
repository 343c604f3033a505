"""The admin control plane: a FastAPI app on its own listener, beside the data plane.

* ``app``     ``create_admin_app(gw)``: routers, error envelopes, the OpenAPI document
* ``server``  ``AdminServer``: uvicorn inside the gateway's running event loop
* ``routes``  ``tenants``, ``keys``, ``rules``, ``ops`` (pools, explain, audit, shadow)
* ``deps``    the Gateway, its store, the token check, the path's tenant, the audit log
* ``models``  request and response bodies; ``policy``: a policy must fit the rules
* ``wire``    orjson answers, the error envelope, how bodies are read
* ``cli``     ``gateway admin ...``

The data plane (``gateway.server`` and below) never imports this package;
``gateway.serve`` joins the two.
"""

"""The ``gateway`` command: serve, validate, explain.

``gateway serve [--rules FILE] [--host H] [--port P] [--admin-host H] [--admin-port P]``
runs the proxy, and the admin API on its own listener;
``gateway validate FILE`` prints every problem of a rules file with its YAML path;
``gateway explain FILE REQUEST.json`` prints the routing decision for a request
without sending it. REQUEST.json is either a request body, or
``{"path": "/v1/chat/completions", "headers": {...}, "body": {...}}``.
``gateway engines launch|sim ...`` runs the engines/ package's commands, and ``gateway
admin ...`` calls the admin API.

This is the one module of gateway/ that imports engines/ (the local engines ``serve``
starts, the ``engines`` commands); engines/ imports nothing of gateway/ and is handed plain
values, such as the tiers' endpoint URLs (docs/architecture.md, top-level packages).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from pathlib import Path

import orjson

from engines.launcher import LocalEngines, installed, plan
from gateway.errors import GatewayError
from gateway.routing.classify import check_model
from gateway.routing.explain import explain
from gateway.routing.textmodel import ModelFiles
from gateway.rules.effective import describe_line, rules_settings
from gateway.rules.schema import Rules, RulesError, load_rules
from gateway.settings import REPO_RULES, Settings, load_settings
from gateway.tenancy.tenants import Effective


def _load(path: Path) -> Rules:
    try:
        rules = load_rules(path)
        check_model(rules, ModelFiles(), str(path))
        return rules
    except RulesError as e:
        print(f"error: {e.source}: {len(e.errors)} problem(s)", file=sys.stderr)
        for err in e.errors:
            print(f"  {err}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(
            rules=args.rules,
            host=args.host,
            port=args.port,
            admin_host=args.admin_host,
            admin_port=args.admin_port,
            workers=args.workers,
        )
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        print(f"error: bad settings: {_one_line(e)}", file=sys.stderr)
        return 2
    from gateway.telemetry.logs import setup_logging

    setup_logging(settings.log_level, settings.access_log)
    path = settings.rules_path()
    rules = _load(path).with_endpoints(settings.pool_urls)
    tiers = ", ".join(f"{n} -> {','.join(t.endpoints)}" for n, t in rules.tiers.items())
    print(f"gateway: rules {path}; tiers: {tiers}", flush=True)
    problem = _open_store(settings)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    engines = _local_engines(settings, rules)
    try:
        if settings.worker_count() > 1:
            return _supervise(settings, path)
        return _serve_one(settings, rules, path, engines is not None)
    finally:
        if engines is not None:
            engines.stop()


def _open_store(settings: Settings) -> str | None:
    """Say which store this gateway uses and where its data lives; create or migrate the
    embedded store's file once (before any worker opens it). Why it cannot start, or None."""
    from gateway.store.factory import prepare_file, store_line
    from gateway.supervisor import check_workers

    if settings.reuse_port:  # a supervised worker: the supervisor has said it and checked
        return None
    problem = check_workers(settings)
    if problem is not None:
        return problem
    print(store_line(settings), flush=True)
    return prepare_file(settings)


def _one_line(e: ValueError) -> str:
    """A settings error in one line: ``GATEWAY_X: what is wrong`` for each field."""
    from pydantic import ValidationError

    if not isinstance(e, ValidationError):
        return str(e)
    parts = []
    for err in e.errors():
        field = "_".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"GATEWAY_{field.upper()}: {msg}" if field else msg)
    return "; ".join(parts)


def _supervise(settings: Settings, path: Path) -> int:
    from gateway.supervisor import Supervisor

    argv = ["--rules", str(path), "--host", settings.host, "--port", str(settings.port)]
    argv += ["--admin-host", settings.admin_host, "--admin-port", str(settings.admin_port)]
    return Supervisor(settings, argv).run()


def _serve_one(settings: Settings, rules: Rules, path: Path, self_check: bool) -> int:
    from engines.launcher import self_check_hook
    from gateway.admin.server import AdminListenError
    from gateway.serve import build_app, run
    from gateway.server.drain import END_GRACE, on_sigterm

    app = build_app(settings, rules, path, path.read_text(encoding="utf-8"), _say)
    app.on_startup.append(_tune_gc)
    on_sigterm(app, settings.drain_listen_seconds)
    if self_check:
        app.on_startup.append(self_check_hook(settings.host, settings.port, _say))
    try:  # aiohttp's run_app, its listener under the connection policy
        run(app, settings, _say, _new_loop(), settings.drain_seconds + END_GRACE)
    except AdminListenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


# Collect the youngest generation after this many more container allocations than frees,
# not CPython's 700. The objects of the requests in flight alone pass 700 (64 requests hold
# a few thousand), so at 700 a collection ran every few requests and walked them all: 7 % of
# the CPU under 64 clients. Request objects are freed by reference counts; what waits for
# the collector (reference cycles) is a few objects per thousand requests.
GC_GEN0_THRESHOLD = 10_000


async def _tune_gc(app: object) -> None:
    """Move start-up objects (rules, pools, code) out of the collector's view, so that full
    collections under load stop walking them (a GC-instrumented profiling run saw them go
    from ~28 ms to ~3 ms); collect the young generation less often (GC_GEN0_THRESHOLD)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, *gc.get_threshold()[1:])


def _local_engines(settings: Settings, rules: Rules) -> LocalEngines | None:
    """Start the local CPU engines when the tiers point at local ports nobody answers."""
    if settings.local_engines == "off":
        return None
    # "auto": only behind the embedded defaults (the repository's rules, tiers not
    # overridden); "on": whatever the rules say, as long as the ports are local
    default = settings.rules_path().resolve() == REPO_RULES
    if settings.local_engines == "auto" and not default:
        return None
    endpoints = {name: tier.endpoints for name, tier in rules.tiers.items()}
    wanted = [(t, p) for t, p in plan(endpoints) if t not in settings.pool_urls]
    if not wanted:
        return None
    problem = installed()
    if problem is not None:
        msg = (
            f"gateway: no engine answers on {', '.join(f':{p}' for _, p in wanted)} and "
            f"the local engine is not installed: {problem}"
        )
        if settings.local_engines == "on":
            raise SystemExit(f"error: {msg}")
        print(
            msg + "\n  (make install-local, or point the tiers at your engines with "
            "GATEWAY_POOL_<TIER>_URLS)",
            flush=True,
        )
        return None
    engines = LocalEngines(Path(".cache/local-engines"))
    try:
        engines.start(wanted)
    except Exception:
        engines.stop()
        raise
    return engines


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def cmd_validate(args: argparse.Namespace) -> int:
    rules = _load(Path(args.file))
    print(
        f"ok: {args.file}: {len(rules.tiers)} tiers, {len(rules.rules)} rules, "
        f"{len(rules.tasks)} tasks, {len(rules.sla_classes)} SLA classes"
    )
    print("effective settings (defaults filled in):")
    for name, s in rules_settings(rules).items():
        print("  " + describe_line(name, s))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    rules = _load(Path(args.file))
    try:
        request = orjson.loads(Path(args.request).read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        print(f"error: {args.request}: {e}", file=sys.stderr)
        return 2
    if not isinstance(request, dict):
        print(f"error: {args.request}: expected a JSON object", file=sys.stderr)
        return 2
    try:
        eff = _policies(args.tenant_policy, args.key_policy)
    except ValueError as e:
        print(f"error: bad policy: {e}", file=sys.stderr)
        return 2
    try:
        out = explain(rules, request, eff)
    except GatewayError as e:
        print(f"error: the gateway would answer {e.status} {e.code}: {e.message}", file=sys.stderr)
        return 1
    sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _policies(tenant: str | None, key: str | None) -> Effective | None:
    """The merged policy of a tenant and a key given as JSON, as the gateway would merge."""
    if tenant is None and key is None:
        return None
    from gateway.tenancy.tenants import ApiKey, Policy, Tenant, effective_policy

    t = Tenant(id="cli", name="cli", policy=Policy.model_validate_json(tenant or "{}"))
    k = ApiKey(
        id="cli",
        tenant_id="cli",
        digest="",
        prefix="",
        policy=Policy.model_validate_json(key or "{}"),
    )
    return effective_policy(t, k)


def engines_main(argv: list[str]) -> int:
    """``gateway engines launch|sim ...``: the engines/ package's own commands."""
    what, rest = (argv[0], argv[1:]) if argv else ("", [])
    if what == "launch":
        from engines.sglang import launch_main

        return launch_main(rest)
    if what == "sim":
        from engines.sim import sim_main

        return int(sim_main(rest))
    print("usage: gateway engines {launch,sim} ...", file=sys.stderr)
    return 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gateway", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the gateway")
    s.add_argument("--rules", type=Path, default=None, help="routing_rules.yaml")
    s.add_argument("--host", default=None)
    s.add_argument("--port", type=int, default=None)
    s.add_argument(
        "--workers", default=None, help="data-plane processes sharing the ports (N or auto)"
    )
    s.add_argument("--admin-host", default=None, help="the admin API's listener (127.0.0.1)")
    s.add_argument("--admin-port", type=int, default=None, help="the admin API's port (8081)")
    s.set_defaults(func=cmd_serve)
    v = sub.add_parser("validate", help="check a rules file")
    v.add_argument("file")
    v.set_defaults(func=cmd_validate)
    e = sub.add_parser("explain", help="print the routing decision for a request")
    e.add_argument("file")
    e.add_argument("request")
    e.add_argument("--tenant-policy", default=None, help="a tenant's policy, JSON")
    e.add_argument("--key-policy", default=None, help="the key's own policy, JSON")
    e.set_defaults(func=cmd_explain)
    sub.add_parser("engines", help="launch TIER [--dry-run] | sim --port P ...")
    sub.add_parser("admin", help="admin API calls: gateway admin --help")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["engines"]:
        return engines_main(argv[1:])
    if argv[:1] == ["admin"]:
        from gateway.admin.cli import main as admin_main

        return admin_main(argv[1:])
    args = parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())

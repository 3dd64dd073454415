"""`trainstack serve [--host H] [--port P] [--token-hashes DIR | --no-auth] [--tls-cert F
--tls-key F] [--allowed-hosts H,...] [overrides ...]`: the Training API and dashboard
(jobs/api/) under uvicorn.

Overrides select the cluster the service submits to and reads from (stack=prod,
cluster.kubeconfig=...); requests cannot change them. Tokens: DIR holds the SHA-256 hashes of
the tokens, each mapped to its user (jobs/api/auth.py: the mounted Kubernetes Secret);
`--hash-token` prints the hash of a token read from stdin (at least 32 characters); `--admin
NAME` lets that user cancel anyone's runs. Without tokens the service only listens on loopback
(`--no-auth`). `--tls-cert/--tls-key` serve HTTPS; `--secure-cookies` marks cookies Secure
when TLS ends in front of the server (an NLB with an ACM certificate). `--allowed-hosts` lists
the Host header values served (default: the bind address, plus `localhost` on loopback; any
host when bound to all addresses): a DNS-rebinding page cannot reach a `--no-auth` server by
another name.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn

from jobs.api.app import SERVER_OPTIONS, create_app
from jobs.api.auth import MIN_TOKEN_CHARS, TokenConfigError, TokenHashes, token_hash
from jobs.api.eval_scheduler import EvalScheduler
from jobs.api.service import Service
from jobs.api.sweep_journal import recover
from jobs.commands import arguments
from jobs.commands.arguments import TOKEN_HASHES_ENV
from jobs.errors import EXIT_BAD_INPUT, one_line
from jobs.submission import BadInput

add_arguments = arguments.serve
"""The CLI builds the parser with it; completion reads jobs.commands.arguments alone."""

LOOPBACK = ("127.0.0.1", "::1", "localhost")
ANY_ADDRESS = ("0.0.0.0", "::", "")
KEEP_ALIVE_S = 75


def fail(message: str) -> int:
    print(f"trainstack serve: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    if args.hash_token:
        token = sys.stdin.readline().strip()
        if not token:
            return fail("--hash-token: no token on stdin")
        if len(token) < MIN_TOKEN_CHARS:
            return fail(
                f"--hash-token: the token has {len(token)} characters; at least "
                f"{MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 32`)"
            )
        print(token_hash(token))
        return 0
    if (args.tls_cert is None) != (args.tls_key is None):
        return fail("--tls-cert and --tls-key go together")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path is not None and not path.is_file():
            return fail(f"{flag} {path}: no such file")
    if args.max_follows is not None and args.max_follows < 1:
        return fail(f"--max-follows {args.max_follows}: at least 1")
    allowed_hosts = allowed_hosts_for(args.host, args.allowed_hosts)
    if args.no_auth and args.token_hashes:
        return fail("give one of --token-hashes DIR or --no-auth")
    if args.no_auth and args.host not in LOOPBACK:
        return fail(f"--no-auth listens on loopback only; --host {args.host} needs --token-hashes")
    if not args.no_auth and not args.token_hashes:
        return fail(f"--token-hashes DIR (or ${TOKEN_HASHES_ENV}) is required; or --no-auth")
    try:
        tokens = (
            None if args.no_auth else TokenHashes(Path(args.token_hashes), admins=tuple(args.admin))
        )
    except (OSError, TokenConfigError) as err:
        return fail(str(err))
    if tokens is not None and tokens.empty:
        return fail(f"--token-hashes {args.token_hashes}: no token hashes in it")

    extra = {} if args.max_follows is None else {"max_follows_per_caller": args.max_follows}
    try:
        service = Service(overrides=args.overrides, **extra)
    except BadInput as err:
        return fail(str(err))
    except Exception as err:  # Hydra composition errors of the server's own overrides
        return fail(one_line(err))
    # Before the first request: what a killed predecessor left half done (jobs.api.sweep_journal).
    for line in recover(service.backend):
        print(f"trainstack serve: {service.redact(line)}", file=sys.stderr, flush=True)

    # eval.every_checkpoint's eval Jobs, for every run that asks (jobs.api.eval_scheduler).
    def say(line: str) -> None:
        print(f"trainstack serve: {service.redact(line)}", file=sys.stderr, flush=True)

    evals = EvalScheduler(service.backend, float(service.cfg.backend.poll_interval_s), say)
    evals.start()
    try:
        _run_server(args, service, tokens, allowed_hosts)
    finally:
        evals.stop()
    return 0


def _run_server(args, service: Service, tokens, allowed_hosts: list[str]) -> None:
    tls = args.tls_cert is not None
    uvicorn.run(
        create_app(
            service,
            tokens,
            allowed_hosts=allowed_hosts,
            secure_cookies=args.secure_cookies or tls,
        ),
        host=args.host,
        port=args.port,
        ssl_certfile=str(args.tls_cert) if tls else None,
        ssl_keyfile=str(args.tls_key) if tls else None,
        log_level="info",
        **SERVER_OPTIONS,
        # Longer than a load balancer's idle timeout and a polling client's interval: the server
        # closing an idle keep-alive connection as a client reuses it is a reset request.
        timeout_keep_alive=KEEP_ALIVE_S,
    )


def allowed_hosts_for(host: str, listed: str | None) -> list[str]:
    """`--allowed-hosts`, else the bind address (and `localhost` on loopback); any host when
    bound to every address (the cluster: tokens guard it, probes name the pod's IP)."""
    if listed:
        return [h.strip() for h in listed.split(",") if h.strip()]
    if host in ANY_ADDRESS:
        return ["*"]
    hosts = [host.strip("[]")]
    if host in LOOPBACK:
        hosts += [h for h in ("localhost", "127.0.0.1", "::1") if h not in hosts]
    return hosts

"""Serve the coding environment over HTTP and WebSocket (openenv's create_app on uvicorn), from code or the CLI.

    python -m composer.env.server --tasks 20 --seed 0 --port 0   # prints "serving coding env at http://127.0.0.1:PORT"
    python -m composer.env.server --tasks-file train.jsonl --max-steps 20 --hidden-tests

    from openenv.core.generic_client import GenericEnvClient
    from composer.env.server import serve_env

    with serve_env(records) as url, GenericEnvClient(base_url=url).sync() as client:
        r = client.reset(instance_id=records[0]["instance_id"])   # or instance=record, seed=i, nothing (round robin)
        r = client.step({"tool": "run_tests", "args": {}})
        r.observation["text"], r.observation["info"]["tests"], r.reward, r.done

An episode lives in one WebSocket session (`/ws`; each connection gets its own CodingEnv, up to
max_sessions at once). openenv 0.3.0's HTTP POST /reset and /step build a fresh environment per
request, so they cannot carry an episode; /health, /schema, /metadata and /docs are plain HTTP.
Observations arrive as {"text", "info"} plus top-level reward and done: the tracing info is an
observation field because 0.3.0 drops Observation.metadata from the wire.

A step message that is not a CodingAction at all (no "tool" string, "args" not an object) is
refused by openenv before it reaches the environment (an error message, no step taken); anything
that parses, an unknown tool or bad arguments included, is a step with an error observation.
"""

import argparse
import contextlib
import functools
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import uvicorn
from openenv.core.env_server import create_app
from starlette.websockets import WebSocketDisconnect

from composer.env.defences import probes
from composer.env.embedded.tasks import SPLITS, load_jsonl
from composer.env.environment import CodingAction, CodingEnv, CodingObservation, EnvConfig


def make_app(tasks: list[dict] | None = None, config: EnvConfig | None = None, *, max_sessions: int = 4):
    """The FastAPI app: one CodingEnv per WebSocket session, drawing from `tasks` when reset names none."""
    factory = functools.partial(CodingEnv, tasks=tasks, config=config)
    return create_app(factory, CodingAction, CodingObservation, env_name="composer-coding",
                      max_concurrent_envs=max_sessions)


def _quiet_disconnects(app):
    """openenv 0.3.0's /ws handler closes the socket again after the client's "close" message and catches only
    RuntimeError; uvicorn's websockets-sansio (the non-deprecated implementation) raises WebSocketDisconnect
    there, logged as a traceback per episode. That one is harmless: the session is already torn down."""

    async def wrapped(scope, receive, send):
        try:
            await app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise

    return wrapped


@contextlib.contextmanager
def serve_env(tasks: list[dict] | None = None, config: EnvConfig | None = None, *, host: str = "127.0.0.1",
              port: int = 0, max_sessions: int = 4):
    """Serve on host:port (0: a free port) in a background thread; yields the base URL, stops on exit."""
    # Bound here so that port 0 is resolved before uvicorn starts; IPPROTO_TCP so asyncio sets TCP_NODELAY
    # (without it each small message waits for the peer's delayed ACK).
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         proto=socket.IPPROTO_TCP)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    url = f"http://{host}:{sock.getsockname()[1]}"
    app = _quiet_disconnects(make_app(tasks, config, max_sessions=max_sessions))
    config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, ws="websockets-sansio",
                            timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="composer-env-server")
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the environment server failed to start (see the log above)")
            time.sleep(0.01)
        yield url
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m composer.env.server",
                                     description="Serve the coding environment (OpenEnv HTTP + WebSocket).")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--tasks", type=int, default=20, metavar="N", help="generate N embedded tasks, each with "
                        "held-out probes (default 20)")
    source.add_argument("--tasks-file", type=Path, metavar="FILE", help="SWE-bench records, JSONL (tasks.save_jsonl)")
    parser.add_argument("--seed", type=int, default=0, help="task generation seed")
    parser.add_argument("--split", choices=SPLITS, default="train")
    parser.add_argument("--max-steps", type=int, default=EnvConfig.max_steps)
    parser.add_argument("--hidden-tests", action="store_true", help="the agent's copy has no tests (SWE-bench style)")
    parser.add_argument("--test-timeout", type=float, default=EnvConfig.test_timeout_s, metavar="S")
    parser.add_argument("--max-sessions", type=int, default=4, help="concurrent WebSocket sessions")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    args = parser.parse_args(argv)
    try:
        records = load_jsonl(args.tasks_file) if args.tasks_file else \
            probes.rewarded(args.tasks, seed=args.seed, split=args.split)[0]  # rewards count: tasks with probes
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    config = EnvConfig(max_steps=args.max_steps, visible_tests=not args.hidden_tests, test_timeout_s=args.test_timeout)
    # SIGTERM (a parent's terminate()) unwinds like Ctrl-C, so the server closes its socket and sessions.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with serve_env(records, config, host=args.host, port=args.port, max_sessions=args.max_sessions) as url:
            print(f"serving coding env at {url} ({len(records)} tasks, WebSocket {url}/ws)", flush=True)
            threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

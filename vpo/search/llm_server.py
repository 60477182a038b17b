"""An OpenAI-compatible chat-completions endpoint on 127.0.0.1 for a cell's model, for the length of a job.

The evolutionary search (`vpo.search.evolve`) drives a trained model through OpenEvolve's OpenAI client. Two
servers give that client the same interface:

- `LoopbackServer` (CPU, the tiny models): a stdlib HTTP server in a thread of the job's own process,
  answering `POST /v1/chat/completions` and `GET /v1/models` with the project's torch backend.
  It lives in the job's process, so it is gone when the job ends or is killed.
- `vpo.search.vllm_server.vllm_server` (GPU): vLLM's own OpenAI-compatible server for the merged model, started as
  a child process bound to 127.0.0.1 that the kernel stops when the job's process dies (PR_SET_PDEATHSIG).

Both bind a free port on 127.0.0.1 only and answer only requests that carry the job's random bearer
token (`Authorization: Bearer <token>`, 401 otherwise): any local user can reach a loopback port. A
request's `seed` seeds its sampling, so the same request gives the same completion (the search's
reproducibility rests on it). The loopback server bounds what a client can make it do: bodies over
`max_body_bytes` get 413 unread, a malformed request 400 with the reason, a connection holds no worker
until its first byte is in and is closed when none came within `idle_timeout_s`, a request whose headers
and body have not all arrived `request_timeout_s` after its first byte is dropped however its bytes
trickle (a socket timeout alone restarts with every byte: 8 connections sending a byte a second once held
every worker), and requests are served by a fixed pool of threads.
"""

from __future__ import annotations

import io
import json
import logging
import math
import secrets
import selectors
import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer

from vpo.generate import SamplingSettings

log = logging.getLogger(__name__)
HOST = "127.0.0.1"
_MAX_BODY_BYTES = 4 << 20  # a chat request of the search is a few kB; 413 beyond this
_MAX_SEED = 2**63 - 1  # torch.manual_seed's range


def free_port() -> int:
    """A port nobody listens on now (the caller binds it at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class RequestError(ValueError):
    """A malformed request: answered with HTTP 400 and this message."""


def _number(body: dict, key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"'{key}' must be a finite number, got {value!r}")
    return float(value)


def _integer(body: dict, key: str, default: int, lowest: int, highest: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= highest:
        raise RequestError(f"'{key}' must be an integer in {lowest}..{highest}, got {value!r}")
    return value


def _sampling_from_request(body: dict, *, max_tokens_cap: int):
    """The `SamplingSettings` of one chat-completions request body (OpenAI field names); RequestError
    naming the field for anything else than the numbers the API allows."""

    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    if _integer(body, "n", 1, 1, 2**31) != 1:
        raise RequestError("n > 1 is not supported; send one request per completion")
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _integer(body, key, max_tokens_cap, 1, 2**31)
    try:
        return SamplingSettings(
            temperature=_number(body, "temperature", 1.0),
            top_p=_number(body, "top_p", 1.0),
            max_new_tokens=min(max_tokens, max_tokens_cap),
            seed=_integer(body, "seed", 0, 0, _MAX_SEED),
        )
    except ValueError as err:  # SamplingSettings' own range checks
        raise RequestError(str(err)) from None


def _conversation_from_request(body: dict) -> list[dict]:
    """The request's messages as {role, content} dicts; empty system messages are dropped (the
    project's models were trained on user turns alone, and OpenEvolve always sends a system turn)."""
    if not isinstance(body, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(body).__name__}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    out = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise RequestError("every message needs a 'role' and a 'content'")
        content = message.get("content") or ""
        if isinstance(content, list):  # the content-parts form: keep the text parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if message["role"] == "system" and not str(content).strip():
            continue
        out.append({"role": str(message["role"]), "content": str(content)})
    return out


class _DeadlineReader(io.RawIOBase):
    """A connection's reads for http.server: the wait for a request's first byte is bounded by `idle_s`;
    from that byte on, the rest of its headers and body must arrive within `request_s` in all."""

    def __init__(self, sock: socket.socket, idle_s: float, request_s: float):
        super().__init__()
        self.sock, self.idle_s, self.request_s = sock, idle_s, request_s
        self.deadline: float | None = None  # None: between requests

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.deadline is None:
            self.sock.settimeout(self.idle_s)
        else:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the request did not arrive within {self.request_s:g} s")
            self.sock.settimeout(left)
        count = self.sock.recv_into(buffer)
        if count and self.deadline is None:
            self.deadline = time.monotonic() + self.request_s
        return count

    def request_read(self) -> None:
        """The request is answered: the next wait is for another request."""
        self.deadline = None


class _PooledHTTPServer(HTTPServer):
    """An HTTP server whose connections are handled by a fixed pool of threads, each connection handed to a
    worker only once its first byte is in: until then it waits in the serving thread's selector, closed after
    `app.idle_timeout_s` (or, beyond `MAX_WAITING`, when newer ones arrive). Idle connections hold no worker:
    40 of them once held the 8 workers 30 s each and delayed a request with the token by 150 s. The listen
    backlog holds the search's bursts (socketserver's default is 5)."""

    request_queue_size = 128
    daemon_threads = True
    MAX_WAITING = 256  # connections that have sent nothing yet; the oldest is closed beyond this

    def __init__(self, address, handler, *, workers: int, app):
        super().__init__(address, handler)
        self.app = app  # what the handler serves (LoopbackServer)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-server")
        self._stopping, self._stopped = threading.Event(), threading.Event()

    def serve_forever(self, poll_interval: float = 0.25) -> None:
        """Accept connections, hold each until it is readable or idle past its deadline, hand readable ones to
        the pool; until `shutdown`."""
        waiting: dict[socket.socket, float] = {}  # connection -> when it is closed unless it has sent a byte
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self.socket, selectors.EVENT_READ, None)
                while not self._stopping.is_set():
                    for key, _ in selector.select(timeout=poll_interval):
                        if key.data is None:  # the listening socket: a new connection
                            self._admit(selector, waiting)
                            continue
                        selector.unregister(key.fileobj)
                        del waiting[key.fileobj]
                        self.pool.submit(self._handle, key.fileobj, key.data)
                    now = time.monotonic()
                    for connection in [c for c, deadline in waiting.items() if deadline <= now]:
                        self._drop(selector, waiting, connection)
                for connection in list(waiting):
                    self._drop(selector, waiting, connection)
        finally:
            self._stopped.set()

    def _admit(self, selector, waiting: dict) -> None:
        try:
            connection, address = self.get_request()
        except OSError:
            return
        while len(waiting) >= self.MAX_WAITING:
            self._drop(selector, waiting, next(iter(waiting)))  # the oldest: dicts keep insertion order
        selector.register(connection, selectors.EVENT_READ, address)
        waiting[connection] = time.monotonic() + self.app.idle_timeout_s

    def _drop(self, selector, waiting: dict, connection) -> None:
        selector.unregister(connection)
        del waiting[connection]
        self.shutdown_request(connection)

    def shutdown(self) -> None:
        self._stopping.set()
        self._stopped.wait(timeout=10)

    def _handle(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def server_close(self):
        super().server_close()
        self.pool.shutdown(wait=False, cancel_futures=True)


class _ChatHandler(BaseHTTPRequestHandler):
    """The chat-completions endpoint of `server.app` (a LoopbackServer): one connection's requests."""

    def setup(self):
        app = self.server.app
        self.timeout = app.idle_timeout_s  # the socket's (writes): an idle or slow client is dropped
        super().setup()
        self.reader = _DeadlineReader(self.connection, app.idle_timeout_s, app.request_timeout_s)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self):
        """One request, answered; whatever path it took, the next wait is for another request."""
        try:
            super().handle_one_request()
        finally:
            self.reader.request_read()

    def _send(self, status: int, payload: dict, *, close: bool = False) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str, *, close: bool = False) -> None:
        self._send(status, {"error": {"message": message, "type": kind}}, close=close)

    def _authorised(self) -> bool:
        if secrets.compare_digest(self.headers.get("Authorization", ""), f"Bearer {self.server.app.token}"):
            return True
        self._error(401, "missing or wrong bearer token (the job's API key)", "authentication_error")
        return False

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if not self._authorised():
            return
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(
                200,
                {"object": "list", "data": [{"id": self.server.app.model_name, "object": "model", "owned_by": "vpo"}]},
            )
        else:
            self._error(404, f"no route {self.path}", "not_found")

    def _body(self):
        """The request's JSON body; RequestError (400), or None after answering 411 or 413."""
        length = self.headers.get("Content-Length")
        if length is None:
            self._error(411, "a Content-Length header is required", "invalid_request_error", close=True)
            return None
        if not length.isdigit():
            raise RequestError(f"Content-Length must be a non-negative integer, got {length!r}")
        if int(length) > self.server.app.max_body_bytes:
            self._error(
                413,
                f"the body has {length} bytes; at most {self.server.app.max_body_bytes} are accepted",
                "invalid_request_error",
                close=True,
            )
            return None
        try:
            data = self.rfile.read(int(length))
        except TimeoutError as err:
            self._error(408, str(err), "invalid_request_error", close=True)
            return None
        try:
            return json.loads(data or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
            raise RequestError(f"the body is not JSON this server reads: {type(err).__name__}") from None

    def do_POST(self):  # noqa: N802
        if not self._authorised():
            self.close_connection = True
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {self.path}", "not_found")
            return
        try:
            body = self._body()
            if body is not None:
                self._send(200, self.server.app.complete(body))
        except RequestError as err:
            self._error(400, str(err), "invalid_request_error", close=True)
        except Exception as err:  # a failed generation is the client's error to see, not a dead server
            log.exception("chat completion failed")
            self._error(500, str(err), "server_error")

    def log_message(self, fmt, *args):  # requests go to the job log at debug level only
        log.debug("%s %s", self.address_string(), fmt % args)


class LoopbackServer:
    """`with LoopbackServer(backend, name) as server:` serves `backend` at `server.url` (…/v1) to clients
    that send `server.token` as their bearer token (OpenAI clients: as the API key).

    `backend` is a `vpo.generate.TorchBackend`; completions are generated one at a time (the
    sampling seed is global torch state) while `workers` threads read and answer requests."""

    def __init__(
        self,
        backend,
        model_name: str,
        *,
        max_tokens_cap: int,
        max_body_bytes: int = _MAX_BODY_BYTES,
        workers: int = 8,
        idle_timeout_s: float = 30.0,
        request_timeout_s: float = 5.0,
    ):
        self.backend, self.model_name, self.max_tokens_cap = backend, model_name, max_tokens_cap
        self.max_body_bytes, self.workers, self.idle_timeout_s = max_body_bytes, workers, idle_timeout_s
        self.request_timeout_s = request_timeout_s  # a loopback request of a few kB takes milliseconds
        self.token = secrets.token_urlsafe(32)
        self.requests = 0
        self._lock = threading.Lock()
        self._httpd: _PooledHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def complete(self, body: dict) -> dict:
        """One chat completion (the JSON the server answers with)."""
        sampling = _sampling_from_request(body, max_tokens_cap=self.max_tokens_cap)
        conversation = _conversation_from_request(body)
        tokenizer = self.backend.tokenizer
        with self._lock:
            text = self.backend.generate([conversation], 1, sampling)[0][0]
            self.requests += 1
        rendered = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        prompt_tokens = len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
        completion_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length" if completion_tokens >= sampling.max_new_tokens else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def __enter__(self) -> "LoopbackServer":
        self._httpd = _PooledHTTPServer((HOST, 0), _ChatHandler, workers=self.workers, app=self)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="llm-server", daemon=True)
        self._thread.start()
        log.info("model server for %s at %s", self.model_name, self.url)
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

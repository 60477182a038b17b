"""An OpenAI-compatible chat-completions endpoint on 127.0.0.1 for a cell's model, for the length of a job.

The evolutionary search (`vpo.evolve`) drives a trained model through OpenEvolve's OpenAI client. Two
servers give that client the same interface:

- `LoopbackServer` (CPU, the tiny models): a stdlib HTTP server in a thread of the job's own process,
  answering `POST /v1/chat/completions` and `GET /v1/models` with the project's transformers backend.
  It lives in the job's process, so it is gone when the job ends or is killed.
- `vllm_server` (GPU): vLLM's own OpenAI-compatible server for the merged model, started as a child
  process bound to 127.0.0.1 that the kernel stops when the job's process dies (PR_SET_PDEATHSIG).

Both bind a free port on 127.0.0.1 only. A request's `seed` seeds its sampling, so the same request
gives the same completion (the search's reproducibility rests on it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

log = logging.getLogger(__name__)
HOST = "127.0.0.1"


def free_port() -> int:
    """A port nobody listens on now (the caller binds it at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class RequestError(ValueError):
    """A malformed request: answered with HTTP 400 and this message."""


def sampling_from_request(body: dict, *, max_tokens_cap: int):
    """The `SamplingSettings` of one chat-completions request body (OpenAI field names)."""
    from vpo.generate import SamplingSettings

    if int(body.get("n", 1) or 1) != 1:
        raise RequestError("n > 1 is not supported; send one request per completion")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or max_tokens_cap
    try:
        return SamplingSettings(
            temperature=float(1.0 if body.get("temperature") is None else body["temperature"]),
            top_p=float(1.0 if body.get("top_p") is None else body["top_p"]),
            max_new_tokens=min(int(max_tokens), max_tokens_cap),
            seed=int(body["seed"]) if body.get("seed") is not None else 0,
        )
    except (TypeError, ValueError) as err:
        raise RequestError(f"bad sampling field: {err}") from None


def conversation_from_request(body: dict) -> list[dict]:
    """The request's messages as {role, content} dicts; empty system messages are dropped (the
    project's models were trained on user turns alone, and OpenEvolve always sends a system turn)."""
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


class LoopbackServer:
    """`with LoopbackServer(backend, name) as server:` serves `backend` at `server.url` (…/v1).

    `backend` is a `vpo.generate.TransformersBackend`; requests are answered one at a time (the
    sampling seed is global torch state)."""

    def __init__(self, backend, model_name: str, *, max_tokens_cap: int):
        self.backend, self.model_name, self.max_tokens_cap = backend, model_name, max_tokens_cap
        self.requests = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def complete(self, body: dict) -> dict:
        """One chat completion (the JSON the server answers with)."""
        sampling = sampling_from_request(body, max_tokens_cap=self.max_tokens_cap)
        conversation = conversation_from_request(body)
        tokenizer = self.backend.tokenizer
        with self._lock:
            text = self.backend.generate([conversation], 1, sampling)[0][0]
            self.requests += 1
        rendered = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        prompt_tokens = len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
        completion_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "length" if completion_tokens >= sampling.max_new_tokens else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (http.server's naming)
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model",
                                                                  "owned_by": "vpo"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self):  # noqa: N802
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    self._send(200, server.complete(body))
                except (RequestError, json.JSONDecodeError) as err:
                    self._send(400, {"error": {"message": str(err), "type": "invalid_request_error"}})
                except Exception as err:  # a failed generation is the client's error to see, not a dead server
                    log.exception("chat completion failed")
                    self._send(500, {"error": {"message": str(err), "type": "server_error"}})

            def log_message(self, fmt, *args):  # requests go to the job log at debug level only
                log.debug("%s %s", self.address_string(), fmt % args)

        return Handler

    def __enter__(self) -> "LoopbackServer":
        self._httpd = ThreadingHTTPServer((HOST, 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="llm-server", daemon=True)
        self._thread.start()
        log.info("model server for %s at %s", self.model_name, self.url)
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)


def _die_with_parent() -> None:
    """In a child before exec: the kernel sends SIGTERM when the parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_until_serving(url: str, *, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    """Poll `url`/models until it answers; fail early if `process` exits first."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the model server exited with status {process.returncode} before serving")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1.0)
    raise TimeoutError(f"the model server at {url} did not answer within {timeout_s:.0f} s")


@contextlib.contextmanager
def vllm_server(model_path: str, model_name: str, *, seed: int, max_model_len: int | None = None,
                gpu_memory_utilization: float = 0.85, startup_timeout_s: float = 900) -> Iterator[str]:
    """vLLM's OpenAI-compatible server for `model_path` on 127.0.0.1; yields its base URL (…/v1)."""
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path),
               "--served-model-name", model_name, "--host", HOST, "--port", str(port), "--seed", str(seed),
               "--gpu-memory-utilization", str(gpu_memory_utilization)]
    if max_model_len:
        command += ["--max-model-len", str(max_model_len)]
    process = subprocess.Popen(command, preexec_fn=_die_with_parent)
    url = f"http://{HOST}:{port}/v1"
    try:
        wait_until_serving(url, timeout_s=startup_timeout_s, process=process)
        log.info("vLLM server for %s at %s (pid %d)", model_name, url, process.pid)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

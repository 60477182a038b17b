"""vLLM's own OpenAI-compatible server for a merged model (GPU), the evolutionary search's model server
where `vpo.search.llm_server.LoopbackServer` serves the CPU's tiny models: a child process bound to 127.0.0.1
that the kernel stops when the job's process dies (PR_SET_PDEATHSIG), answering only requests that
carry the job's random bearer token.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

from vpo.search.llm_server import HOST, free_port

log = logging.getLogger(__name__)


def _die_with_parent() -> None:
    """In a child before exec: the kernel sends SIGTERM when the parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _wait_until_serving(url: str, *, timeout_s: float, token: str, process: subprocess.Popen | None = None) -> None:
    """Poll `url`/models (with the bearer token) until it answers; fail early if `process` exits first."""
    deadline = time.time() + timeout_s
    request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {token}"})
    while time.time() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the model server exited with status {process.returncode} before serving")
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1.0)
    raise TimeoutError(f"the model server at {url} did not answer within {timeout_s:.0f} s")


@contextlib.contextmanager
def vllm_server(
    model_path: str,
    model_name: str,
    *,
    seed: int,
    max_model_len: int | None = None,
    gpu_memory_utilization: float = 0.85,
    startup_timeout_s: float = 900,
) -> Iterator[tuple[str, str]]:
    """vLLM's OpenAI-compatible server for `model_path` on 127.0.0.1; yields its base URL (…/v1) and
    the random API key it requires (given to vLLM through the environment, not its command line,
    which other local users can read)."""
    import os

    port, token = free_port(), secrets.token_urlsafe(32)
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_path),
        "--served-model-name",
        model_name,
        "--host",
        HOST,
        "--port",
        str(port),
        "--seed",
        str(seed),
        "--gpu-memory-utilization",
        str(gpu_memory_utilization),
    ]
    if max_model_len:
        command += ["--max-model-len", str(max_model_len)]
    process = subprocess.Popen(command, preexec_fn=_die_with_parent, env={**os.environ, "VLLM_API_KEY": token})
    url = f"http://{HOST}:{port}/v1"
    try:
        _wait_until_serving(url, timeout_s=startup_timeout_s, token=token, process=process)
        log.info("vLLM server for %s at %s (pid %d)", model_name, url, process.pid)
        yield url, token
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

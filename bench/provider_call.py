"""CPU per model call: the provider seam's HTTP path against a bare asyncio client (the floor)
and the openai SDK, the same requests to the same local server (issue 32).

The server runs in a child process (its CPU is not counted); each client makes N chat calls
with C in flight on one event loop and we report this process's CPU per call (user + system)
and the TCP connections the server accepted. `python bench/provider_call.py [--quick]`.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import time

REPLY = json.dumps(
    {
        "id": "x",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2},
    }
).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


def serve(port_queue: multiprocessing.Queue[int], latency: float) -> None:
    """An asyncio HTTP/1.1 keep-alive server answering every POST with REPLY after `latency`
    (a `GET .../models` with its models list at once, as an OpenAI-compatible server does)."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if head.startswith(b"GET /connections"):
                    body = str(connections).encode()
                elif head.startswith(b"GET ") and b"/models" in head.split(b"\r\n", 1)[0]:
                    body = MODELS  # a models list is not inference: answered at once
                else:
                    await reader.readexactly(length)
                    await asyncio.sleep(latency)
                    body = REPLY
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


async def bare(port: int, n: int, c: int) -> None:
    """The floor: raw HTTP/1.1 over asyncio streams, one kept connection per worker."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: "
        f"{len(body)}\r\ncontent-type: application/json\r\n\r\n"
    ).encode()

    async def worker(k: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(k):
            writer.write(head + body)
            h = await reader.readuntil(b"\r\n\r\n")
            size = int(h.split(b"content-length: ")[1].split(b"\r\n")[0])
            json.loads(await reader.readexactly(size))
        writer.close()

    await asyncio.gather(*(worker(n // c) for _ in range(c)))


async def seam(port: int, n: int, c: int) -> None:
    from pytest_agenteval.core.chat import ChatMessage
    from pytest_agenteval.providers.seam import Provider, Route

    os.environ["BENCH_KEY"] = "bench-key-0123456789"
    provider = Provider(Route("bench", "openai", f"http://127.0.0.1:{port}/v1", "BENCH_KEY"))
    messages = [ChatMessage("user", "hi")]

    async def worker(k: int) -> None:
        for _ in range(k):
            await provider.send("m", messages)

    await asyncio.gather(*(worker(n // c) for _ in range(c)))


async def hop(port: int, n: int, c: int) -> None:
    """The seam as the attempt pool calls an async agent today: C threads, each handing its
    call to one event loop thread and blocking on the answer (the per-call thread hop)."""
    import threading

    from pytest_agenteval.core.chat import ChatMessage
    from pytest_agenteval.providers.seam import Provider, Route

    os.environ["BENCH_KEY"] = "bench-key-0123456789"
    provider = Provider(Route("bench", "openai", f"http://127.0.0.1:{port}/v1", "BENCH_KEY"))
    messages = [ChatMessage("user", "hi")]
    loop = asyncio.get_running_loop()

    def worker(k: int) -> None:
        for _ in range(k):
            asyncio.run_coroutine_threadsafe(provider.send("m", messages), loop).result()

    threads = [threading.Thread(target=worker, args=(n // c,)) for _ in range(c)]
    for thread in threads:
        thread.start()
    await asyncio.gather(*(asyncio.to_thread(thread.join) for thread in threads))


async def sdk(port: int, n: int, c: int) -> None:
    import openai

    client = openai.AsyncOpenAI(api_key="k", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)

    async def worker(k: int) -> None:
        for _ in range(k):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )

    await asyncio.gather(*(worker(n // c) for _ in range(c)))
    await client.close()


def connections(port: int) -> int:
    import urllib.request

    return int(urllib.request.urlopen(f"http://127.0.0.1:{port}/connections").read())


def measure(name: str, n: int, c: int, latency: float) -> tuple[float, float, int]:
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(queue, latency), daemon=True)
    server.start()
    port = queue.get()
    run = {"bare": bare, "seam": seam, "hop": hop, "sdk": sdk}[name]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    asyncio.run(run(port, n, c))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    opened = connections(port) - 1
    server.kill()
    return cpu / n * 1000, wall, opened


def main() -> None:
    quick = "--quick" in sys.argv
    n = 400 if quick else 2000
    for c, latency in ((64, 0.05), (512, 0.5)):
        print(f"{n} calls, {c} in flight, {latency * 1000:g} ms each")
        floor = None
        for name in ("bare", "seam", "hop", "sdk"):
            try:
                ms, wall, opened = measure(name, n, c, latency)
            except ImportError:
                print(f"  {name:5}  (not installed)")
                continue
            floor = floor or ms
            print(
                f"  {name:5}  {ms:.3f} ms CPU/call  ({ms / floor:.2f}x the floor)  "
                f"wall {wall:.2f} s  connections {opened}"
            )


if __name__ == "__main__":
    main()

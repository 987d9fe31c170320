"""Server reads and answer states per agent framework, alone and with freshcache.

    python benchmarks/frameworks.py [--steps 100] [--json PATH]
    python benchmarks/frameworks.py --tools [--steps 100] [--json PATH]

``--tools``: tool calls made against a tool list the server no longer has, the
framework alone and with freshcache (`benchmarks/framework_tools.py`).

Against the official-SDK fixture server (`tests/fixtures/sdk_server.py`) on 127.0.0.1,
for each framework: ``--steps`` agent steps, each reading the same 5 selected
resources; 3 of them change during the run (at 1/4, 1/2 and 3/4 of the steps). A step
after a change starts once the change notification has reached the client, as it
would with a model call between two steps; the framework alone has nothing to wait
for. Each framework runs twice on a freshly reset server:

- **alone**: the framework's own resource path, on every step:
  pydantic-ai ``MCPToolset(url, cache_resources=False).read_resource`` inside a tool
  the agent calls (driven by pydantic-ai's ``FunctionModel``, no model call); the
  Agents SDK ``MCPServerStreamableHttp.read_resource``; for LangChain,
  ``langchain-mcp-adapters`` cannot be installed beside SDK 2.x (it pins ``mcp<2``), so
  its ``load_mcp_resources`` loop is reproduced as it is written: one
  ``session.read_resource`` per URI (official SDK 2.x session), each turned into a Blob;
- **with freshcache**: the same step through `freshcache.integrations` (the
  pydantic-ai toolset, `FreshMCPServer`, `load_resources`) over
  ``McpClientSource.connect(url)``.

Counted: the fixture's own per-URI read counters (so every server read, the cache's
first reads and re-reads after an acknowledgment included); every answer's state
(``fresh``/``awaiting_fresh_source``/``denied``/``not_found``; the framework alone
returns text with no state: ``text``), and whether its text was the server's current
text. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from freshcache import FreshCache, McpClientSource, ResourceWithheldError  # noqa: E402
from tests.conftest import SdkServer, start_sdk_server, stop_process  # noqa: E402

URIS = [f"guide://bench/doc-{n}" for n in range(5)]
CHANGED = URIS[:3]

Step = Callable[[], Awaitable[list[tuple[str, str, str | None]]]]
"""One agent step: (uri, state, text) for each of the 5 resources."""


def text_of(uri: str, version: int) -> str:
    return f"{uri} version {version}"


class Run:
    """One framework variant over ``steps`` steps, with the change schedule."""

    def __init__(self, server: SdkServer, steps: int) -> None:
        self.server = server
        self.steps = steps
        self.current = dict.fromkeys(URIS, 1)
        self.states: Counter[str] = Counter()
        self.current_answers = 0
        self.answers = 0

    def reads(self) -> int:
        counts = self.server.state()["reads"]
        return sum(int(counts.get(uri, 0)) for uri in URIS)

    async def play(self, step: Step, heard: Callable[[str, str], Awaitable[None]]) -> int:
        before = self.reads()
        change_at = {self.steps * k // 4: CHANGED[k - 1] for k in (1, 2, 3)}
        for number in range(self.steps):
            if number in change_at:
                uri = change_at[number]
                self.current[uri] += 1
                text = text_of(uri, self.current[uri])
                self.server.control("set", uri=uri, text=text)
                await heard(uri, text)
            for uri, state, text in await step():
                self.answers += 1
                self.states[state] += 1
                self.current_answers += text == text_of(uri, self.current[uri])
        return self.reads() - before


def reset(server: SdkServer) -> None:
    server.control("reset")
    for uri in URIS:
        server.control("set", uri=uri, text=text_of(uri, 1), notify=False)


async def nothing_to_wait_for(uri: str, text: str) -> None:
    return None


def waiting_for(cache: FreshCache) -> Callable[[str, str], Awaitable[None]]:
    async def heard(uri: str, text: str) -> None:
        with anyio.fail_after(10):
            while cache.status(uri).state == "fresh" and cache.status(uri).text != text:
                await anyio.sleep(0.002)

    return heard


async def until_live(cache: FreshCache) -> None:
    with anyio.fail_after(10):
        while cache.stream_status != "live":
            await anyio.sleep(0.005)


# ---------------------------------------------------------------- pydantic-ai


def calling_every_uri() -> Any:
    """A FunctionModel that reads the 5 URIs (one tool call each), then answers."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def respond(messages: Any, info: Any) -> Any:
        if any(getattr(p, "part_kind", "") == "tool-return" for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("read_resource", {"uri": u}) for u in URIS])

    return FunctionModel(respond)


def tool_answers(result: Any) -> list[tuple[str, str, str | None]]:
    answers = []
    for message in result.new_messages():
        for part in message.parts:
            if getattr(part, "part_kind", "") != "tool-return":
                continue
            content = str(part.content)
            uri = next(u for u in URIS if content.startswith(u))  # every answer names its URI
            if getattr(part, "outcome", "success") == "retried" or "not available" in content:
                answers.append((uri, "awaiting_fresh_source", None))
            else:
                answers.append((uri, "fresh", content))
    return answers


async def pydantic_ai(server: SdkServer, steps: int, fresh: bool) -> Run:
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.toolsets import FunctionToolset

    from freshcache.integrations.pydantic_ai import fresh_resources

    run = Run(server, steps)
    if not fresh:
        toolset = MCPToolset(server.url, cache_resources=False)

        async def read_resource(uri: str) -> str:
            return str(await toolset.read_resource(uri))

        agent = Agent(calling_every_uri(), toolsets=[FunctionToolset([read_resource])])
        async with toolset:

            async def step() -> list[tuple[str, str, str | None]]:
                return [(u, "text", t) for u, _, t in tool_answers(await agent.run("step"))]

            run.reads_made = await run.play(step, nothing_to_wait_for)  # type: ignore[attr-defined]
        return run
    async with FreshCache(McpClientSource.connect(server.url), select=URIS) as cache:
        await until_live(cache)
        agent = Agent(calling_every_uri(), toolsets=[fresh_resources(cache, uris=URIS)])

        async def step() -> list[tuple[str, str, str | None]]:
            return tool_answers(await agent.run("step"))

        run.reads_made = await run.play(step, waiting_for(cache))  # type: ignore[attr-defined]
    return run


# ---------------------------------------------------------------- OpenAI Agents SDK


async def openai_agents(server: SdkServer, steps: int, fresh: bool) -> Run:
    from agents.mcp import MCPServerStreamableHttp

    from freshcache.integrations.openai_agents import FreshMCPServer

    run = Run(server, steps)
    async with MCPServerStreamableHttp({"url": server.url}) as inner:
        if not fresh:

            async def step() -> list[tuple[str, str, str | None]]:
                out = []
                for uri in URIS:
                    result = await inner.read_resource(uri)
                    out.append((uri, "text", result.contents[0].text))
                return out

            run.reads_made = await run.play(step, nothing_to_wait_for)  # type: ignore[attr-defined]
            return run
        async with FreshCache(McpClientSource.connect(server.url), select=URIS) as cache:
            await until_live(cache)
            wrapped = FreshMCPServer(inner, cache)

            async def fresh_step() -> list[tuple[str, str, str | None]]:
                out: list[tuple[str, str, str | None]] = []
                for uri in URIS:
                    try:
                        result = await wrapped.read_resource(uri)
                        out.append((uri, "fresh", result.contents[0].text))
                    except ResourceWithheldError as exc:
                        out.append((uri, exc.results[0].state, None))
                return out

            run.reads_made = await run.play(fresh_step, waiting_for(cache))  # type: ignore[attr-defined]
    return run


# ---------------------------------------------------------------- LangChain


async def langchain(server: SdkServer, steps: int, fresh: bool) -> Run:
    from langchain_core.documents.base import Blob

    from freshcache.integrations.langchain import load_resources

    run = Run(server, steps)
    if not fresh:
        from mcp import Client

        async with Client(server.url) as client:

            async def step() -> list[tuple[str, str, str | None]]:
                # load_mcp_resources, as written: session.read_resource per URI -> Blob.
                out = []
                for uri in URIS:
                    result = await client.session.read_resource(uri)
                    for item in result.contents:
                        data = getattr(item, "text", None)
                        if data is None:
                            data = base64.b64decode(item.blob)
                        blob = Blob.from_data(data=data, metadata={"uri": uri})
                        out.append((uri, "text", blob.as_string()))
                return out

            run.reads_made = await run.play(step, nothing_to_wait_for)  # type: ignore[attr-defined]
        return run
    async with FreshCache(McpClientSource.connect(server.url), select=URIS) as cache:
        await until_live(cache)

        async def fresh_step() -> list[tuple[str, str, str | None]]:
            blobs = {
                b.metadata["uri"]: b.as_string()
                for b in await load_resources(cache, URIS, withheld="skip")
            }
            return [
                (u, "fresh", blobs[u]) if u in blobs else (u, cache.status(u).state, None)
                for u in URIS
            ]

        run.reads_made = await run.play(fresh_step, waiting_for(cache))  # type: ignore[attr-defined]
    return run


FRAMEWORKS = {
    "pydantic-ai": pydantic_ai,
    "openai-agents": openai_agents,
    "langchain": langchain,
}


async def main(steps: int) -> list[dict[str, Any]]:
    server = start_sdk_server()
    rows = []
    try:
        for name, play in FRAMEWORKS.items():
            for fresh in (False, True):
                reset(server)
                run = await play(server, steps, fresh)
                rows.append(
                    {
                        "framework": name,
                        "variant": "with freshcache" if fresh else "alone",
                        "server_reads": run.reads_made,  # type: ignore[attr-defined]
                        "answers": run.answers,
                        "states": dict(run.states),
                        "current_text": run.current_answers,
                    }
                )
    finally:
        stop_process(server.process)
    return rows


def table(rows: list[dict[str, Any]], steps: int) -> str:
    lines = [
        f"{steps} agent steps x {len(URIS)} resources, {len(CHANGED)} changes",
        f"{'framework':<14} {'variant':<16} {'server reads':>12} {'answers':>8}  "
        f"{'states':<28} {'current text':>12}",
    ]
    for row in rows:
        states = ", ".join(f"{n} {s}" for s, n in sorted(row["states"].items()))
        lines.append(
            f"{row['framework']:<14} {row['variant']:<16} {row['server_reads']:>12} "
            f"{row['answers']:>8}  {states:<28} {row['current_text']:>12}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--tools", action="store_true", help="the tool-list benchmark")
    args = parser.parse_args()
    if args.tools:
        from benchmarks import framework_tools

        rows = anyio.run(framework_tools.main, args.steps)
        print(framework_tools.table(rows))
    else:
        rows = anyio.run(main, args.steps)
        print(table(rows, args.steps))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")

"""The framework integrations against the real frameworks and the official-SDK fixture server.

No model is called: pydantic-ai runs with its own `FunctionModel`; the Agents SDK
wrapper and the LangChain loader are driven directly.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from freshcache import FreshCache, McpClientSource, ResourceWithheldError
from tests.conftest import SdkServer, start_sdk_server, stop_process
from tests.polling import reads_done, until

APPROVAL = "guide://shipping/approval"
RETURNS = "guide://shipping/returns"
V1 = "Shipping approval v1: orders over $500 need a manager."
V2 = "Shipping approval v2: orders over $800 need a manager."

pytestmark = [pytest.mark.anyio, pytest.mark.wire]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def shared_server() -> Iterator[SdkServer]:
    """One fixture server for the module (reset before each test): CI has 2 cores."""
    server = start_sdk_server()
    try:
        yield server
    finally:
        stop_process(server.process)


@pytest.fixture
def server(shared_server: SdkServer) -> SdkServer:
    shared_server.control("reset")
    return shared_server


async def live(cache: FreshCache) -> None:
    """Wait (bounded) until the subscription stream is acknowledged and its re-reads landed."""
    await until(lambda: cache.stream_status == "live" and reads_done(cache))


async def changed_to(cache: FreshCache, uri: str, text: str) -> None:
    """Wait (bounded) until the cache has heard of the change and re-read ``uri``."""
    await until(lambda: cache.status(uri).text == text)


# ---------------------------------------------------------------- pydantic-ai


def tool_calling_model(uri: str):
    """A `FunctionModel` that calls ``read_resource(uri)`` once and answers with what it got."""
    from pydantic_ai.messages import (
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import FunctionModel

    def respond(messages, info):
        for part in messages[-1].parts:
            # pydantic-ai 2.x marks a ModelRetry as a tool return with outcome "retried".
            if isinstance(part, RetryPromptPart) or getattr(part, "outcome", None) == "retried":
                return ModelResponse(parts=[TextPart(f"retry asked: {part.content}")])
            if isinstance(part, ToolReturnPart):
                return ModelResponse(parts=[TextPart(f"tool said: {part.content}")])
        return ModelResponse(parts=[ToolCallPart("read_resource", {"uri": uri})])

    return FunctionModel(respond)


async def test_a_pydantic_ai_agent_reads_fresh_resources_through_the_cache(server: SdkServer):
    from pydantic_ai import Agent

    from freshcache.integrations.pydantic_ai import fresh_resources

    async with FreshCache(McpClientSource.connect(server.url), select=[APPROVAL, RETURNS]) as cache:
        agent = Agent(tool_calling_model(APPROVAL), toolsets=[fresh_resources(cache)])
        first = await agent.run("Who approves a $600 order?")
        await live(cache)
        reads = server.reads(APPROVAL)
        again = await agent.run("And now?")
        assert first.output == again.output == f"tool said: {V1}"
        assert server.reads(APPROVAL) == reads  # the second run was a fresh hit

        server.control("set", uri=APPROVAL, text=V2)
        await changed_to(cache, APPROVAL, V2)
        after = await agent.run("And now?")
        assert after.output == f"tool said: {V2}"


async def test_pydantic_ai_hears_awaiting_as_a_retry_or_a_sentence_never_old_text(
    server: SdkServer,
):
    from pydantic_ai import Agent

    from freshcache.integrations.pydantic_ai import fresh_resources

    async with FreshCache(
        McpClientSource.connect(server.url), select=[APPROVAL, RETURNS], read_timeout=0.3
    ) as cache:
        await cache.read(APPROVAL)
        server.control("slow", uri=APPROVAL, ms=3000)
        server.control("set", uri=APPROVAL, text=V2)
        await until(lambda: cache.status(APPROVAL).state == "awaiting_fresh_source")

        retrying = Agent(tool_calling_model(APPROVAL), toolsets=[fresh_resources(cache)])
        retried = await retrying.run("Who approves?")
        assert retried.output.startswith("retry asked: ")
        assert "awaiting a fresh source" in retried.output and "v1" not in retried.output

        telling = Agent(
            tool_calling_model(APPROVAL),
            toolsets=[fresh_resources(cache, on_awaiting="result")],
        )
        told = await telling.run("Who approves?")
        assert told.output.startswith("tool said: ")
        assert "not available yet" in told.output and "v1" not in told.output

        server.control("deny", uri=RETURNS)
        server.control("notify", uri=RETURNS)
        await until(lambda: cache.status(RETURNS).state == "denied")
        denied = await Agent(tool_calling_model(RETURNS), toolsets=[fresh_resources(cache)]).run(
            "Returns?"
        )
        assert "denied" in denied.output and "30 days" not in denied.output

        elsewhere = await Agent(
            tool_calling_model("guide://elsewhere"), toolsets=[fresh_resources(cache)]
        ).run("?")
        assert "unknown resource" in elsewhere.output


async def test_pydantic_ai_instructions_carry_the_steps_context(server: SdkServer):
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from freshcache.integrations.pydantic_ai import fresh_instructions

    seen: list[str] = []

    def respond(messages, info):
        seen.append(messages[0].instructions or "")
        return ModelResponse(parts=[TextPart("ok")])

    server.control("deny", uri=RETURNS)
    async with FreshCache(McpClientSource.connect(server.url), select=[APPROVAL, RETURNS]) as cache:
        agent = Agent(
            FunctionModel(respond), instructions=fresh_instructions(cache, [APPROVAL, RETURNS])
        )
        await agent.run("Who approves?")
    assert V1 in seen[0]
    assert f"{RETURNS} is denied" in seen[0] and "30 days" not in seen[0]


# ---------------------------------------------------------------- OpenAI Agents SDK


async def test_the_agents_sdk_server_reads_resources_through_the_cache(server: SdkServer):
    from agents.mcp import MCPServer, MCPServerStreamableHttp

    from freshcache.integrations.openai_agents import FreshMCPServer

    async with (
        MCPServerStreamableHttp({"url": server.url}, require_approval="always") as inner,
        FreshCache(McpClientSource.connect(server.url), select=[APPROVAL, RETURNS]) as cache,
    ):
        fresh = FreshMCPServer(inner, cache)
        assert isinstance(fresh, MCPServer)
        assert fresh.name == inner.name
        assert "set_resource" in {tool.name for tool in await fresh.list_tools()}
        assert fresh._needs_approval_policy == inner._needs_approval_policy
        from agents import Agent
        from agents.run_context import RunContextWrapper

        agent = Agent(name="helper", mcp_servers=[fresh])
        tools = await agent.get_mcp_tools(RunContextWrapper(context=None))
        assert "set_resource" in {tool.name for tool in tools}  # the Agents SDK takes it as is

        first = await fresh.read_resource(APPROVAL)
        await live(cache)
        reads = server.reads(APPROVAL)
        second = await fresh.read_resource(APPROVAL)
        assert first.contents[0].text == second.contents[0].text == V1
        assert server.reads(APPROVAL) == reads

        server.control("set", uri=APPROVAL, text=V2)
        await changed_to(cache, APPROVAL, V2)
        assert (await fresh.read_resource(APPROVAL)).contents[0].text == V2

        server.control("deny", uri=RETURNS)
        server.control("notify", uri=RETURNS)
        await until(lambda: cache.status(RETURNS).state == "denied")
        with pytest.raises(ResourceWithheldError, match="returns is denied") as raised:
            await fresh.read_resource(RETURNS)
        assert raised.value.results[0].state == "denied"
        step = await fresh.context([APPROVAL, RETURNS])
        assert [r.uri for r in step.fresh] == [APPROVAL]


# ---------------------------------------------------------------- LangChain


async def test_langchain_blobs_are_fresh_or_withheld(server: SdkServer):
    from langchain_core.documents.base import Blob

    from freshcache.integrations.langchain import load_resources

    async with FreshCache(McpClientSource.connect(server.url), select=[APPROVAL, RETURNS]) as cache:
        blobs = await load_resources(cache, [APPROVAL, RETURNS])
        await live(cache)
        reads = server.reads(APPROVAL)
        assert all(isinstance(blob, Blob) for blob in blobs)
        assert [(b.metadata["uri"], b.as_string(), b.mimetype) for b in blobs] == [
            (APPROVAL, V1, "text/plain"),
            (RETURNS, "Returns v1: 30 days.", "text/plain"),
        ]
        everything = await load_resources(cache)
        assert {b.metadata["uri"] for b in everything} == {APPROVAL, RETURNS}
        assert server.reads(APPROVAL) == reads

        server.control("deny", uri=RETURNS)
        server.control("notify", uri=RETURNS)
        await until(lambda: cache.status(RETURNS).state == "denied")
        with pytest.raises(RuntimeError, match="returns is denied"):
            await load_resources(cache, [APPROVAL, RETURNS])
        kept = await load_resources(cache, [APPROVAL, RETURNS], withheld="skip")
        assert [b.metadata["uri"] for b in kept] == [APPROVAL]


# ---------------------------------------------------------------- without the extras


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("openai_agents", "agents", "openai-agents"),
        ("langchain", "langchain_core", "langchain"),
    ],
    ids=["pydantic-ai", "openai-agents", "langchain"],
)
def test_an_integration_without_its_framework_names_the_install_command(module, framework, extra):
    code = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        "from freshcache import MissingDependencyError\n"
        "try:\n"
        f"    import freshcache.integrations.{module}\n"
        "except MissingDependencyError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"pip install '.[{extra}]'" in done.stdout, done.stdout + done.stderr

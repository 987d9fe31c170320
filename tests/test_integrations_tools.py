"""The frameworks' tool registries follow the cache's tool catalog (issue 26 part 4).

Real framework packages, their own test models (no model is called), and the reference
server on loopback (real HTTP): its tool list changes mid-run and the next agent step
is offered the new list; a server that is down leaves its tools out of the step, with
a clear state, and the run goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from freshcache import FreshCache, HttpSource
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from tests.polling import until

pytestmark = pytest.mark.anyio

U = "guide://shipping/approval"
SEARCH = {"name": "search", "inputSchema": {"type": "object", "properties": {}}}
LOOKUP = {"name": "lookup", "inputSchema": {"type": "object", "properties": {}}}


@asynccontextmanager
async def cache_on(server: ReferenceServer) -> AsyncIterator[FreshCache]:
    server.set(U, "v1")
    server.set_catalog("tools", [SEARCH], notify=False)
    async with (
        ReferenceHttpServer(server) as http,
        FreshCache(HttpSource(http.url), select=[U], read_timeout=2.0) as cache,
    ):
        await until(lambda: cache.stream_status == "live")
        yield cache


async def test_pydantic_ai_sees_a_tool_list_changed_mid_run_at_the_next_step() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from freshcache.integrations.pydantic_ai import fresh_tools

    server = ReferenceServer()
    offered: list[list[str]] = []
    async with cache_on(server) as cache:

        async def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
            names = sorted(t.name for t in info.function_tools)
            offered.append(names)
            if len(offered) == 1:
                # The server changes its tools while the model "thinks"; freshcache
                # hears tools/list_changed before the next step.
                server.set_catalog("tools", [LOOKUP], notify=True)
                await until(lambda: cache.catalog_status("tools").names == ("lookup",))
                return ModelResponse(parts=[ToolCallPart("search", {})])
            if len(offered) == 2:
                return ModelResponse(parts=[ToolCallPart(names[0], {})])
            return ModelResponse(parts=[TextPart("done")])

        toolset = fresh_tools(cache)
        result = await Agent(FunctionModel(respond), toolsets=[toolset]).run("go")
    assert result.output == "done"
    assert offered[0] == ["search"]
    assert offered[1] == ["lookup"]  # the change heard mid-run, at the next step
    # The cache already held the list without search: the call of the vanished tool
    # was `unknown_tool`, never sent; the model then called lookup.
    assert server.tool_calls == ["lookup"]


async def test_pydantic_ai_run_goes_on_without_the_tools_of_a_server_that_is_down() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from freshcache.integrations.pydantic_ai import fresh_tools

    server = ReferenceServer()
    seen: list[tuple[list[str], str]] = []
    async with cache_on(server) as cache:
        server.down = True
        server.drop_streams()
        await until(lambda: cache.stream_status != "live")
        cache.invalidate_catalog("tools")

        async def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
            instructions = str(getattr(info, "instructions", "") or messages[0].instructions)
            seen.append(([t.name for t in info.function_tools], instructions))
            return ModelResponse(parts=[TextPart("answered without tools")])

        toolset = fresh_tools(cache, timeout=1.0)
        result = await Agent(FunctionModel(respond), toolsets=[toolset]).run("go")
    assert result.output == "answered without tools"
    assert seen[0][0] == []
    assert "not available now" in seen[0][1]
    assert toolset.catalog is not None and toolset.catalog.state == "awaiting_fresh_source"


def _agents_model(respond: Any) -> Any:
    """A model for the Agents SDK that answers with ``respond(step, tool_names)``: a
    tool name to call, or ``None`` to finish (no model is called)."""
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class StepModel(Model):
        step = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            tools = args[3] if len(args) > 3 else kwargs["tools"]
            self.step += 1
            call = await respond(self.step, sorted(t.name for t in tools))
            if call is None:
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                item: Any = ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed", content=[text]
                )
            else:
                item = ResponseFunctionToolCall(
                    type="function_call", call_id=f"c{self.step}", name=call, arguments="{}"
                )
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    return StepModel()


async def test_the_agents_sdk_sees_a_tool_list_changed_mid_run_at_the_next_step() -> None:
    from agents import Agent, Runner
    from agents.mcp import MCPServerStreamableHttp

    from freshcache.integrations.openai_agents import FreshMCPServer

    server = ReferenceServer()
    offered: list[list[str]] = []
    async with cache_on(server) as cache:

        async def respond(step: int, names: list[str]) -> str | None:
            offered.append(names)
            if step == 1:
                server.set_catalog("tools", [LOOKUP], notify=True)
                await until(lambda: cache.catalog_status("tools").names == ("lookup",))
                return "search"
            return names[0] if step == 2 else None

        wrapped = MCPServerStreamableHttp({"url": "http://127.0.0.1:9/unused"}, name="guides")
        fresh = FreshMCPServer(wrapped, cache)
        agent = Agent(name="a", model=_agents_model(respond), mcp_servers=[fresh])
        result = await Runner.run(agent, "go")
    assert result.final_output == "done"
    assert offered[:2] == [["search"], ["lookup"]]
    assert server.tool_calls == ["lookup"]  # search, known gone, was never sent


async def test_the_agents_sdk_run_goes_on_when_the_server_is_down() -> None:
    from agents import Agent, Runner
    from agents.mcp import MCPServerStreamableHttp

    from freshcache.integrations.openai_agents import FreshMCPServer

    server = ReferenceServer()
    offered: list[list[str]] = []
    async with cache_on(server) as cache:
        server.down = True
        server.drop_streams()
        await until(lambda: cache.stream_status != "live")
        cache.invalidate_catalog("tools")

        async def respond(step: int, names: list[str]) -> str | None:
            offered.append(names)
            return None

        wrapped = MCPServerStreamableHttp({"url": "http://127.0.0.1:9/unused"}, name="guides")
        fresh = FreshMCPServer(wrapped, cache, timeout=1.0)
        agent = Agent(name="a", model=_agents_model(respond), mcp_servers=[fresh])
        result = await Runner.run(agent, "go")
    assert result.final_output == "done" and offered == [[]]
    assert fresh.catalog is not None and fresh.catalog.state == "awaiting_fresh_source"


async def test_langchain_load_tools_follows_the_catalog_and_calls_through_the_cache() -> None:
    from freshcache.integrations.langchain import load_tools

    server = ReferenceServer()
    async with cache_on(server) as cache:
        tools = await load_tools(cache)
        assert [t.name for t in tools] == ["search"] and tools.catalog.ok
        assert await tools[0].ainvoke({}) == "search called with {}"
        server.set_catalog("tools", [LOOKUP], notify=False)  # nothing heard yet
        # The old tool is called: "unknown tool", one re-list, no retry, a clear error.
        said = await tools[0].ainvoke({})
        assert "no tool 'search' any more" in said and "lookup" in said
        assert [t.name for t in await load_tools(cache)] == ["lookup"]
        server.down = True
        server.drop_streams()
        await until(lambda: cache.stream_status != "live")
        cache.invalidate_catalog("tools")
        down = await load_tools(cache, timeout=1.0)
        assert list(down) == [] and down.catalog.state == "awaiting_fresh_source"


# The model builds its arguments from the definition it was offered; the server then
# changes what the arguments mean and says so, and the cache holds the new catalog
# before the call: each integration says what it offered (`seen=`), so the call is
# `tool_changed` and never sent with the old arguments.
PAY_CENTS = {
    "name": "pay",
    "description": "amount in cents",
    "inputSchema": {"type": "object", "properties": {"amount": {"type": "integer"}}},
}
PAY_DOLLARS = {**PAY_CENTS, "description": "amount in dollars"}


async def _now_in_dollars(server: ReferenceServer, cache: FreshCache) -> None:
    """The server re-describes ``pay`` and notifies; the cache's own re-list settles it."""
    server.set_catalog("tools", [PAY_DOLLARS], notify=True)

    def held_in_dollars() -> bool:
        held = cache.catalog_status("tools")
        return held.state == "fresh" and held.items[0].get("description") == "amount in dollars"

    await until(held_in_dollars)


async def test_pydantic_ai_never_sends_arguments_built_for_a_definition_changed_since() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from freshcache.integrations.pydantic_ai import fresh_tools

    server = ReferenceServer()
    told: list[str] = []
    async with cache_on(server) as cache:
        server.set_catalog("tools", [PAY_CENTS], notify=False)

        async def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
            if len(messages) == 1:
                assert [t.description for t in info.function_tools] == ["amount in cents"]
                await _now_in_dollars(server, cache)  # while the model "thinks"
                return ModelResponse(parts=[ToolCallPart("pay", {"amount": 500})])
            told.extend(
                str(part.content)
                for part in messages[-1].parts
                if isinstance(part, RetryPromptPart | ToolReturnPart)
            )
            return ModelResponse(parts=[TextPart("done")])

        result = await Agent(FunctionModel(respond), toolsets=[fresh_tools(cache)]).run("go")
    assert result.output == "done"
    assert server.tool_calls == []  # 500 cents never became 500 dollars
    assert any("rebuild the call" in text for text in told), told


async def test_the_agents_sdk_never_sends_arguments_built_for_a_definition_changed_since() -> None:
    from agents import Agent, Runner
    from agents.mcp import MCPServerStreamableHttp

    from freshcache.integrations.openai_agents import FreshMCPServer

    server = ReferenceServer()
    async with cache_on(server) as cache:
        server.set_catalog("tools", [PAY_CENTS], notify=False)

        async def respond(step: int, names: list[str]) -> str | None:
            if step == 1:
                await _now_in_dollars(server, cache)
                return "pay"
            return None

        wrapped = MCPServerStreamableHttp({"url": "http://127.0.0.1:9/unused"}, name="guides")
        fresh = FreshMCPServer(wrapped, cache)
        agent = Agent(name="a", model=_agents_model(respond), mcp_servers=[fresh])
        result = await Runner.run(agent, "go")
    assert result.final_output == "done"
    assert server.tool_calls == []


async def test_langchain_never_sends_arguments_built_for_a_definition_changed_since() -> None:
    from freshcache.integrations.langchain import load_tools

    server = ReferenceServer()
    async with cache_on(server) as cache:
        server.set_catalog("tools", [PAY_CENTS], notify=False)
        tools = await load_tools(cache)
        assert [t.description for t in tools] == ["amount in cents"]
        await _now_in_dollars(server, cache)
        said = await tools[0].ainvoke({"amount": 500})
        assert "rebuild the call" in said, said
        assert server.tool_calls == []

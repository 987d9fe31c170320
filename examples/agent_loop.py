"""An agent-style loop that builds each prompt only from resources that are fresh.

    python examples/agent_loop.py http://127.0.0.1:8000/mcp [--select URI ...] [--wait SECONDS]
    python examples/agent_loop.py URL --turns 10 --every 2

Every line typed on stdin is a user turn (or, with ``--turns``, a turn comes every
``--every`` seconds). For each turn the agent reads its selected resources through
freshcache, prints the state of each, and builds the prompt from the ``fresh`` ones
only: a resource that changed and has not been re-read yet, that the server denies,
or that cannot be reached since the server died is named in the prompt as missing,
never quoted from an old copy.

It talks to the server with the official MCP SDK client (``pip install
'freshcache[mcp]'``) through ``McpClientSource.connect``, which lives through a
server that goes away and comes back. Output, one turn::

    turn 3
    state guide://shipping/approval fresh reason=- version=3f1c0a9e2b7d4c11 text="Shipping ..."
    state guide://shipping/returns denied reason=denied version=- text=-
    prompt "Answer using only these documents. ..."
"""

from __future__ import annotations

import argparse
import json
import sys

import anyio

from freshcache import FreshCache, McpClientSource, ReadResult

DEFAULT_SELECTION = ["guide://shipping/approval", "guide://shipping/returns"]


def build_prompt(question: str, results: list[ReadResult]) -> str:
    """The prompt of one turn: fresh texts quoted, everything else only named."""
    parts = ["Answer using only these documents.", f"Question: {question}"]
    for result in results:
        if result.state == "fresh" and result.text is not None:
            parts.append(f"<document uri={result.uri!r}>\n{result.text}\n</document>")
        elif result.state == "denied":
            parts.append(f"(Not available to this user: {result.uri}. Do not cite it.)")
        else:
            # No text: the copy we had may be out of date. Say so instead of quoting it.
            parts.append(f"(Missing: {result.uri} is {result.state} ({result.reason}).)")
    return "\n\n".join(parts)


def show_state(result: ReadResult) -> str:
    text = "-" if result.text is None else json.dumps(result.text[:60])
    return (
        f"state {result.uri} {result.state} reason={result.reason or '-'} "
        f"version={result.version or '-'} text={text}"
    )


async def turn(cache: FreshCache, number: int, question: str, wait: float) -> None:
    results = [await cache.read(uri, timeout=wait) for uri in sorted(cache.selected)]
    print(f"turn {number}")
    for result in results:
        print(show_state(result))
    print(f"prompt {json.dumps(build_prompt(question, results))}", flush=True)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the MCP server's Streamable HTTP endpoint")
    parser.add_argument("--select", action="append", help="a resource URI to rely on (repeat)")
    parser.add_argument("--wait", type=float, default=1.0, help="seconds a read may wait")
    parser.add_argument("--turns", type=int, help="run this many turns instead of reading stdin")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between --turns")
    args = parser.parse_args(argv)
    selection = args.select or DEFAULT_SELECTION

    async with FreshCache(McpClientSource.connect(args.url), select=selection) as cache:
        print(f"ready: {len(selection)} resources selected from {args.url}", flush=True)
        number = 0
        while args.turns is None or number < args.turns:
            if args.turns is None:
                line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                if not line:
                    break  # stdin closed: the conversation is over
                question = line.strip() or "What applies here?"
            else:
                if number:
                    await anyio.sleep(args.every)
                question = "What applies here?"
            number += 1
            await turn(cache, number, question, args.wait)


if __name__ == "__main__":
    anyio.run(main)

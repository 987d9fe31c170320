"""Fresh resources inside agent frameworks: one module per framework, each an optional extra.

- `freshcache.integrations.pydantic_ai`: a pydantic-ai toolset whose resource reads go
  through freshcache (``pip install 'freshcache[pydantic-ai]'``);
- `freshcache.integrations.openai_agents`: an Agents SDK ``MCPServer`` whose
  ``read_resource`` goes through freshcache (``pip install 'freshcache[openai-agents]'``);
- `freshcache.integrations.langchain`: ``load_resources(cache, uris) -> list[Blob]``
  (``pip install 'freshcache[langchain]'``).

``import freshcache`` imports none of them; importing a module without its framework
raises `MissingDependencyError` naming the install command.
"""

from __future__ import annotations

from .._errors import MissingDependencyError


def missing(module: str, extra: str) -> MissingDependencyError:
    """The error for an integration used without its framework, naming the install command."""
    return MissingDependencyError(
        f"freshcache's {extra} integration needs {module!r}: "
        f"pip install 'freshcache[{extra}]' (from a checkout: pip install '.[{extra}]')"
    )

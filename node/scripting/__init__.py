"""Redis scripting: a sandboxed Lua 5.1 runtime per account (``engine``), the bundled libraries
(``libraries``), and the node's registry of runtimes (``Scripts``)."""

from node.scripting.engine import Engine, Function, Host, Library, Script, ScriptError
from node.scripting.registry import Scripts

__all__ = ["Engine", "Function", "Host", "Library", "Script", "ScriptError", "Scripts"]

"""Redis scripting: a sandboxed Lua 5.1 runtime per account (``engine``, with its privileged half in
``prelude.lua``), its records (``records``), the bundled libraries (``libraries``), and the node's
registry of runtimes (``Scripts``)."""

from node.scripting.engine import Engine, Host, Outcome
from node.scripting.records import FLAG_NAMES, Function, Library, Script, ScriptError
from node.scripting.registry import Scripts

__all__ = [
    "FLAG_NAMES",
    "Engine",
    "Function",
    "Host",
    "Library",
    "Outcome",
    "Script",
    "ScriptError",
    "Scripts",
]

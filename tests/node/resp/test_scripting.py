"""Scripts over RESP, against a node in process: EVAL, EVALSHA, SCRIPT, FUNCTION and FCALL answer as
redis-server does, the sandbox holds, and a script's writes are checked and journaled as the
commands it ran.

``CASES`` holds requests run one after another on one connection, with the bytes a live
redis-server 7.0.15 answered (``test_scripting_live`` replays the table against one, so it cannot
drift). Tests that need strings (SET, GET, INCR) use streams and keys instead until strings exist.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.broker import Broker
from node.config.options import Config
from tests.node.resp.test_resp_connection import Peer

CASES: list[tuple[str, list[str], bytes]] = [
    (
        "integer",
        ["EVAL", "return 1", "0"],
        b":1\r\n",
    ),
    (
        "truncated number",
        ["EVAL", "return 3.99", "0"],
        b":3\r\n",
    ),
    (
        "negative truncated",
        ["EVAL", "return -3.99", "0"],
        b":-3\r\n",
    ),
    (
        "huge number",
        ["EVAL", "return 1e20", "0"],
        b":-9223372036854775808\r\n",
    ),
    (
        "string",
        ["EVAL", "return 'hello'", "0"],
        b"$5\r\nhello\r\n",
    ),
    (
        "true",
        ["EVAL", "return true", "0"],
        b":1\r\n",
    ),
    (
        "false",
        ["EVAL", "return false", "0"],
        b"$-1\r\n",
    ),
    (
        "nil",
        ["EVAL", "return nil", "0"],
        b"$-1\r\n",
    ),
    (
        "nested table stops at nil",
        ["EVAL", "return {1,2,{3,'x',nil,4},false,true}", "0"],
        b"*5\r\n:1\r\n:2\r\n*2\r\n:3\r\n$1\r\nx\r\n$-1\r\n:1\r\n",
    ),
    (
        "status table",
        ["EVAL", "return {ok='fine'}", "0"],
        b"+fine\r\n",
    ),
    (
        "error table",
        ["EVAL", "return {err='MY oops'}", "0"],
        b"-MY oops\r\n",
    ),
    (
        "error_reply adds a dash",
        ["EVAL", "return redis.error_reply('MY err')", "0"],
        b"-MY err\r\n",
    ),
    (
        "error_reply without code",
        ["EVAL", "return redis.error_reply('plain')", "0"],
        b"-ERR plain\r\n",
    ),
    (
        "status_reply",
        ["EVAL", "return redis.status_reply('hi there')", "0"],
        b"+hi there\r\n",
    ),
    (
        "status with newline",
        ["EVAL", "return {ok='a\\r\\nb'}", "0"],
        b"+a  b\r\n",
    ),
    (
        "keys and argv",
        ["EVAL", "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}", "2", "k1", "k2", "a1", "a2"],
        b"*4\r\n$2\r\nk1\r\n$2\r\nk2\r\n$2\r\na1\r\n:2\r\n",
    ),
    (
        "only keys",
        ["EVAL", "return {#KEYS, #ARGV, KEYS[2]}", "2", "k1", "k2"],
        b"*3\r\n:2\r\n:0\r\n$2\r\nk2\r\n",
    ),
    (
        "only argv",
        ["EVAL", "return {#KEYS, #ARGV, ARGV[2]}", "0", "a1", "a2"],
        b"*3\r\n:0\r\n:2\r\n$2\r\na2\r\n",
    ),
    (
        "many keys and argv",
        [
            "EVAL",
            "return {#KEYS, #ARGV, KEYS[#KEYS], ARGV[#ARGV], KEYS[#KEYS + 1], ARGV[#ARGV + 1]}",
            "200",
            *(f"k{n}" for n in range(200)),
            *(f"a{n}" for n in range(56)),
        ],
        b"*4\r\n:200\r\n:56\r\n$4\r\nk199\r\n$3\r\na55\r\n",
    ),
    (
        "more keys and argv",
        [
            "EVAL",
            "return {#KEYS, #ARGV, KEYS[#KEYS], ARGV[#ARGV], KEYS[#KEYS + 1], ARGV[#ARGV + 1]}",
            "300",
            *(f"k{n}" for n in range(300)),
            *(f"a{n}" for n in range(57)),
        ],
        b"*4\r\n:300\r\n:57\r\n$4\r\nk299\r\n$3\r\na56\r\n",
    ),
    (
        "first of many returns",
        ["EVAL", "return 1, 2", "0"],
        b":1\r\n",
    ),
    (
        "function returns nil reply",
        ["EVAL", "return function() end", "0"],
        b"$-1\r\n",
    ),
    (
        "sha1hex",
        ["EVAL", "return {redis.sha1hex(''), redis.sha1hex('Pizza & Mandolino')}", "0"],
        (
            b"*2\r\n$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n$40\r\n7482"
            b"2d82031af7493c20eefa13bd07ec4fada82f\r\n"
        ),
    ),
    (
        "call ping",
        ["EVAL", "return redis.call('ping')", "0"],
        b"+PONG\r\n",
    ),
    (
        "call echo number",
        ["EVAL", "return redis.call('echo', 42)", "0"],
        b"$2\r\n42\r\n",
    ),
    (
        "pcall unknown",
        ["EVAL", "return redis.pcall('nope')", "0"],
        b"-ERR Unknown Redis command called from script\r\n",
    ),
    (
        "pcall error type",
        ["EVAL", "return type(redis.pcall('nope'))", "0"],
        b"$5\r\ntable\r\n",
    ),
    (
        "pcall error field",
        ["EVAL", "return redis.pcall('nope')['err']", "0"],
        b"$44\r\nERR Unknown Redis command called from script\r\n",
    ),
    (
        "pcall wrong arity",
        ["EVAL", "return redis.pcall('echo')", "0"],
        b"-ERR Wrong number of args calling Redis command from script\r\n",
    ),
    (
        "pcall noscript",
        ["EVAL", "return redis.pcall('subscribe', 'x')", "0"],
        b"-ERR This Redis command is not allowed from script\r\n",
    ),
    (
        "pcall noscript subcommand",
        ["EVAL", "return redis.pcall('cluster', 'reset')", "0"],
        b"-ERR This Redis command is not allowed from script\r\n",
    ),
    (
        "pcall cluster info",
        ["EVAL", "return redis.pcall('cluster', 'info')", "0"],
        b"-ERR This instance has cluster support disabled\r\n",
    ),
    (
        "pcall bad argument",
        ["EVAL", "return redis.pcall('echo', {})", "0"],
        b"-ERR Lua redis lib command arguments must be strings or integers\r\n",
    ),
    (
        "pcall no argument",
        ["EVAL", "return redis.pcall()", "0"],
        b"-ERR Please specify at least one argument for this redis lib call\r\n",
    ),
    (
        "pcall command error",
        ["EVAL", "return redis.pcall('xadd', 's', 'bad', 'f', 'v')", "0"],
        b"-ERR Invalid stream ID specified as stream command argument\r\n",
    ),
    (
        "lua pcall of call",
        ["EVAL", "return {pcall(redis.call, 'nope')}", "0"],
        b"*2\r\n$-1\r\n$44\r\nERR Unknown Redis command called from script\r\n",
    ),
    (
        "status reply to lua",
        ["EVAL", "local r = redis.call('ping') return {type(r), r['ok']}", "0"],
        b"*2\r\n$5\r\ntable\r\n$4\r\nPONG\r\n",
    ),
    (
        "null bulk to lua false",
        ["EVAL", "return tostring(redis.call('xadd', 's', 'NOMKSTREAM', '*', 'f', 'v'))", "0"],
        b"$5\r\nfalse\r\n",
    ),
    (
        "integer reply to lua",
        ["EVAL", "return type(redis.call('exists', 'nope'))", "0"],
        b"$6\r\nnumber\r\n",
    ),
    (
        "array reply to lua",
        [
            "EVAL",
            (
                "redis.call('xadd', KEYS[1], '1-1', 'f', 'v') return redis.ca"
                "ll('xrange', KEYS[1], '-', '+')"
            ),
            "1",
            "st",
        ],
        b"*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
    ),
    (
        "write then read",
        [
            "EVAL",
            (
                "redis.call('del', KEYS[1]) redis.call('xadd', KEYS[1], '1-1'"
                ", 'a', '1') return {redis.call('xlen', KEYS[1]), redis.call("
                "'type', KEYS[1])}"
            ),
            "1",
            "w",
        ],
        b"*2\r\n:1\r\n+stream\r\n",
    ),
    (
        "xread without block",
        ["EVAL", "return redis.pcall('xread', 'STREAMS', 'nostream', '0')", "0"],
        b"$-1\r\n",
    ),
    (
        "xread block refused",
        ["EVAL", "return redis.pcall('xread', 'BLOCK', '0', 'STREAMS', 'nostream', '$')", "0"],
        b"-ERR xread command is not allowed with BLOCK option from scripts\r\n",
    ),
    (
        "select is the script's own",
        ["EVAL", "redis.call('select', 5) return redis.call('dbsize')", "0"],
        b":0\r\n",
    ),
    (
        "caller db unchanged",
        ["EVAL", "return redis.call('exists', 'w')", "0"],
        b":1\r\n",
    ),
    (
        "unknown global",
        ["EVAL", "return a", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'a' script: bbfcd1ececc90deec823f7fb730e4bfb2"
            b"a4ba625, on @user_script:1.\r\n"
        ),
    ),
    (
        "new global",
        ["EVAL", "a = 1", "0"],
        (
            b"-ERR user_script:1: Attempt to modify a readonly table scrip"
            b"t: b88f1ec0c9fe96fde96a6f9dabcbeee661dd7afe, on @user_script"
            b":1.\r\n"
        ),
    ),
    (
        "overwrite global",
        ["EVAL", "redis = 1", "0"],
        (
            b"-ERR user_script:1: Attempt to modify a readonly table scrip"
            b"t: 00cca49a9d18094f532f6d5cd3ecec29fc0fafd9, on @user_script"
            b":1.\r\n"
        ),
    ),
    (
        "overwrite library field",
        ["EVAL", "redis.call = 1", "0"],
        (
            b"-ERR user_script:1: Attempt to modify a readonly table scrip"
            b"t: 69f883616b1814e2dc95cf801f324e38c5cc5ed2, on @user_script"
            b":1.\r\n"
        ),
    ),
    (
        "overwrite string field",
        ["EVAL", "string.x = 1", "0"],
        (
            b"-ERR user_script:1: Attempt to modify a readonly table scrip"
            b"t: c3eb0a2a15b3d4790b323c4104029c1ae425a769, on @user_script"
            b":1.\r\n"
        ),
    ),
    (
        "setmetatable of globals",
        ["EVAL", "setmetatable(_G, {})", "0"],
        (
            b"-ERR Attempt to modify a readonly table script: 0bf0a51fbb05"
            b"1c942113de0105d3f8e18cdcddb5, on @user_script:1.\r\n"
        ),
    ),
    (
        "metatable of globals",
        ["EVAL", "local g = getmetatable(_G) g.__index = {}", "0"],
        (
            b"-ERR user_script:1: Attempt to modify a readonly table scrip"
            b"t: b1a7e4ca615906790500da2b26a313f2ce643b80, on @user_script"
            b":1.\r\n"
        ),
    ),
    (
        "print is gone",
        ["EVAL", "print('x')", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'print' script: af544869f07ee0ff98e9555085668"
            b"26cfc6fcf49, on @user_script:1.\r\n"
        ),
    ),
    (
        "loadfile is gone",
        ["EVAL", "loadfile('x')", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'loadfile' script: cd22fc3dd8a78f493604a1c08f"
            b"9ed8c40af19447, on @user_script:1.\r\n"
        ),
    ),
    (
        "dofile is gone",
        ["EVAL", "dofile('x')", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'dofile' script: 3e57a163d177c446cd708c7af49e"
            b"417235f80f43, on @user_script:1.\r\n"
        ),
    ),
    (
        "os is gone",
        ["EVAL", "return os.time()", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'os' script: 13dea82ee9da896aebcd10f5e36f4a1e"
            b"eb839b48, on @user_script:1.\r\n"
        ),
    ),
    (
        "io is gone",
        ["EVAL", "return io.open('/etc/passwd')", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'io' script: ff0ec78aec759b1d6c55ba7924645033"
            b"bbb8f413, on @user_script:1.\r\n"
        ),
    ),
    (
        "require is gone",
        ["EVAL", "return require('os')", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'require' script: 8fe85786fe331195d8ab1970d66"
            b"04d7c86966bc8, on @user_script:1.\r\n"
        ),
    ),
    (
        "debug is gone",
        ["EVAL", "return debug.getinfo(1)", "0"],
        (
            b"-ERR user_script:1: Script attempted to access nonexistent g"
            b"lobal variable 'debug' script: 46a716d4ada1b67be64bd3ab8a2d6"
            b"e03214f34dc, on @user_script:1.\r\n"
        ),
    ),
    (
        "loadstring sees the sandbox",
        ["EVAL", "return loadstring('return os')()", "0"],
        (
            b'-ERR [string "return os"]:1: Script attempted to access none'
            b"xistent global variable 'os' script: bf2963f26cfb6b352ff2944"
            b"e5cf42b046c871707, on return os:1.\r\n"
        ),
    ),
    (
        "error string",
        ["EVAL", "error('boom')", "0"],
        (
            b"-ERR user_script:1: boom script: 82903a0434f1503e152f89c03c9"
            b"acd881a0e8150, on @user_script:1.\r\n"
        ),
    ),
    (
        "error table raised",
        ["EVAL", "error({err='MY boom'})", "0"],
        b"-MY boom script: 4c2ee35ef37c857625d6ec6d812eab72377cfa97, on @user_script:1.\r\n",
    ),
    (
        "runtime error",
        ["EVAL", "local t = nil\nreturn t.x", "0"],
        (
            b"-ERR user_script:2: attempt to index local 't' (a nil value)"
            b" script: 5e383a4a9d10a799a7bdaae726524fbbe9af80c0, on @user_"
            b"script:2.\r\n"
        ),
    ),
    (
        "error on line 3",
        ["EVAL", "local a = 1\nlocal b = 2\nerror('third')", "0"],
        (
            b"-ERR user_script:3: third script: 435bc1f08fd6ef84d300d68aa6"
            b"d251b9d4ff47c5, on @user_script:3.\r\n"
        ),
    ),
    (
        "call unknown raises",
        ["EVAL", "redis.call('nope')", "0"],
        (
            b"-ERR Unknown Redis command called from script script: 868b70"
            b"254c94f2e77a6a74713a770118b59f817d, on @user_script:1.\r\n"
        ),
    ),
    (
        "call wrong arity raises",
        ["EVAL", "redis.call('echo')", "0"],
        (
            b"-ERR Wrong number of args calling Redis command from script "
            b"script: 8161d36f3e39ba61c06d38f953b1fb74a56b8e18, on @user_s"
            b"cript:1.\r\n"
        ),
    ),
    (
        "call command error raises",
        ["EVAL", "redis.call('xadd', 's', 'bad', 'f', 'v')", "0"],
        (
            b"-ERR Invalid stream ID specified as stream command argument "
            b"script: 093580dac508afa188aee1cbe5a92f0a73326c83, on @user_s"
            b"cript:1.\r\n"
        ),
    ),
    (
        "call noscript raises",
        ["EVAL", "redis.call('multi')", "0"],
        (
            b"-ERR This Redis command is not allowed from script script: d"
            b"ef2e0239549b300d870f6dea60827c0d5ec1b62, on @user_script:1.\r"
            b"\n"
        ),
    ),
    (
        "compile error",
        ["EVAL", "return 1 +", "0"],
        (
            b"-ERR Error compiling script (new function): user_script:1: u"
            b"nexpected symbol near '<eof>'\r\n"
        ),
    ),
    (
        "compile error line 2",
        ["EVAL", "local x = 1\nx = = 2", "0"],
        b"-ERR Error compiling script (new function): user_script:2: unexpected symbol near '='\r\n",
    ),
    (
        "numkeys not a number",
        ["EVAL", "return 1", "x"],
        b"-ERR value is not an integer or out of range\r\n",
    ),
    (
        "numkeys too big",
        ["EVAL", "return 1", "2", "a"],
        b"-ERR Number of keys can't be greater than number of args\r\n",
    ),
    (
        "numkeys negative",
        ["EVAL", "return 1", "-1"],
        b"-ERR Number of keys can't be negative\r\n",
    ),
    (
        "evalsha short",
        ["EVALSHA", "abc", "0"],
        b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
    ),
    (
        "evalsha missing",
        ["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
        b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
    ),
    (
        "eval arity",
        ["EVAL", "return 1"],
        b"-ERR wrong number of arguments for 'eval' command\r\n",
    ),
    (
        "unpack is there",
        ["EVAL", "return unpack({1, 2, 3})", "0"],
        b":1\r\n",
    ),
    (
        "table.getn is there",
        ["EVAL", "return table.getn({1, 2, 3})", "0"],
        b":3\r\n",
    ),
    (
        "lua version",
        ["EVAL", "return _VERSION", "0"],
        b"$7\r\nLua 5.1\r\n",
    ),
    (
        "stack overflow",
        ["EVAL", "local function f() return 1 + f() end return f()", "0"],
        (
            b"-ERR user_script:1: stack overflow script: 2c347ae0c7feaa40c"
            b"62d8208d59e954ee9ff79ff, on @user_script:1.\r\n"
        ),
    ),
    (
        "seeded random",
        [
            "EVAL",
            "math.randomseed(42) return {tostring(math.random()), math.random(10), math.random(5, 7)}",
            "0",
        ],
        b"*3\r\n$16\r\n0.74452500033403\r\n:4\r\n:5\r\n",
    ),
    (
        "cjson encode",
        ["EVAL", "return cjson.encode({1, 2, {a = 1}})", "0"],
        b'$13\r\n[1,2,{"a":1}]\r\n',
    ),
    (
        "cjson decode",
        [
            "EVAL",
            'local t = cjson.decode(\'[1,"x",{"a":[true]}]\') return {t[1], t[2], tostring(t[3].a[1])}',
            "0",
        ],
        b"*3\r\n:1\r\n$1\r\nx\r\n$4\r\ntrue\r\n",
    ),
    (
        "cjson null",
        ["EVAL", "return tostring(cjson.decode('[null]')[1] == cjson.null)", "0"],
        b"$4\r\ntrue\r\n",
    ),
    (
        "bit ops",
        [
            "EVAL",
            (
                "return {bit.band(0xff, 0x0f), bit.bor(1, 2), bit.bxor(3, 1),"
                " bit.lshift(1, 4), bit.rshift(-1, 28), bit.arshift(-16, 2), "
                "bit.bnot(0), bit.tohex(65535), bit.tohex(255, -4), bit.tobit"
                "(2^32 + 5)}"
            ),
            "0",
        ],
        (
            b"*10\r\n:15\r\n:3\r\n:2\r\n:16\r\n:15\r\n:-4\r\n:-1\r\n$8\r\n0000ffff\r\n$4\r\n00FF"
            b"\r\n:5\r\n"
        ),
    ),
    (
        "log",
        ["EVAL", "redis.log(redis.LOG_NOTICE, 'from a script') return 1", "0"],
        b":1\r\n",
    ),
    (
        "log bad level",
        ["EVAL", "redis.log(9, 'x')", "0"],
        (
            b"-ERR Invalid debug level. script: 33c5adda35db23aef2d79cdf8e"
            b"c88f4a6e44b5f3, on @user_script:1.\r\n"
        ),
    ),
    (
        "log too few",
        ["EVAL", "redis.log(redis.LOG_NOTICE)", "0"],
        (
            b"-ERR redis.log() requires two arguments or more. script: 281"
            b"93da4826f95064c8028d2b351e0e4ec843ddd, on @user_script:1.\r\n"
        ),
    ),
    (
        "setresp bad",
        ["EVAL", "redis.setresp(4)", "0"],
        (
            b"-ERR RESP version must be 2 or 3. script: 68e72e4d8a428b9f59"
            b"9dce492315f2455a425a82, on @user_script:1.\r\n"
        ),
    ),
    (
        "set_repl and replicate_commands",
        ["EVAL", "redis.set_repl(redis.REPL_ALL) return redis.replicate_commands()", "0"],
        b":1\r\n",
    ),
    (
        "ro refuses writes",
        ["EVAL_RO", "return redis.call('xadd', 's', '*', 'f', 'v')", "1", "s"],
        (
            b"-ERR Write commands are not allowed from read-only scripts. "
            b"script: 0ed6e8c28efbaca759cb68ed0f10ceede884dfd4, on @user_s"
            b"cript:1.\r\n"
        ),
    ),
    (
        "ro allows reads",
        ["EVAL_RO", "return redis.call('exists', KEYS[1])", "1", "s"],
        b":0\r\n",
    ),
    (
        "shebang no-writes",
        ["EVAL", "#!lua flags=no-writes\nreturn redis.call('del', 'x')", "0"],
        (
            b"-ERR Write commands are not allowed from read-only scripts. "
            b"script: f256e8f0cae96b2ef605c0b5eea08f51e4e1b22d, on @user_s"
            b"cript:2.\r\n"
        ),
    ),
    (
        "shebang flags with ro",
        ["EVAL_RO", "#!lua\nreturn 1", "0"],
        b"-ERR Can not execute a script with write flag using *_ro command.\r\n",
    ),
    (
        "shebang no-writes with ro",
        ["EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0"],
        b":1\r\n",
    ),
    (
        "shebang bad flag",
        ["EVAL", "#!lua flags=nope\nreturn 1", "0"],
        b"-ERR Unexpected flag in script shebang: nope\r\n",
    ),
    (
        "shebang bad engine",
        ["EVAL", "#!python\nreturn 1", "0"],
        b"-ERR Unexpected engine in script shebang: #!python\r\n",
    ),
    (
        "shebang bad option",
        ["EVAL", "#!lua x=y\nreturn 1", "0"],
        b"-ERR Unknown lua shebang option: x=y\r\n",
    ),
    (
        "shebang without newline",
        ["EVAL", "#!lua", "0"],
        b"-ERR Invalid script shebang\r\n",
    ),
    (
        "shebang keeps line numbers",
        ["EVAL", "#!lua\nerror('second')", "0"],
        (
            b"-ERR user_script:2: second script: 92471a6d3dc9fe13832891834"
            b"323760d61f52984, on @user_script:2.\r\n"
        ),
    ),
    (
        "resp3 map under setresp",
        ["EVAL", "redis.setresp(3) local r = redis.call('xinfo', 'stream', 'nostream') return r", "0"],
        b"-ERR no such key script: 09c438eefe726fd679095fcb0de8b10720322cec, on @user_script:1.\r\n",
    ),
    (
        "double table",
        ["EVAL", "return {double=3.5}", "0"],
        b"$3\r\n3.5\r\n",
    ),
    (
        "big number table",
        ["EVAL", "return {big_number='123456789012345678901234567890'}", "0"],
        b"$30\r\n123456789012345678901234567890\r\n",
    ),
    (
        "map table",
        ["EVAL", "return {map={a=1}}", "0"],
        b"*2\r\n$1\r\na\r\n:1\r\n",
    ),
    (
        "set table",
        ["EVAL", "return {set={a=true}}", "0"],
        b"*1\r\n$1\r\na\r\n",
    ),
    (
        "script load",
        ["SCRIPT", "LOAD", "return 'loaded'"],
        b"$40\r\nb534286061d4b9e4026607613b95c06c06015ae8\r\n",
    ),
    (
        "evalsha loaded",
        ["EVALSHA", "b534286061d4b9e4026607613b95c06c06015ae8", "0"],
        b"$6\r\nloaded\r\n",
    ),
    (
        "evalsha uppercase",
        ["EVALSHA", "B534286061D4B9E4026607613B95C06C06015AE8", "0"],
        b"$6\r\nloaded\r\n",
    ),
    (
        "script exists",
        [
            "SCRIPT",
            "EXISTS",
            "b534286061d4b9e4026607613b95c06c06015ae8",
            "ffffffffffffffffffffffffffffffffffffffff",
        ],
        b"*2\r\n:1\r\n:0\r\n",
    ),
    (
        "script load error",
        ["SCRIPT", "LOAD", "return 1 +"],
        (
            b"-ERR Error compiling script (new function): user_script:1: u"
            b"nexpected symbol near '<eof>'\r\n"
        ),
    ),
    (
        "script flush bad",
        ["SCRIPT", "FLUSH", "NOW"],
        b"-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n",
    ),
    (
        "script flush",
        ["SCRIPT", "FLUSH", "SYNC"],
        b"+OK\r\n",
    ),
    (
        "after flush",
        ["SCRIPT", "EXISTS", "b534286061d4b9e4026607613b95c06c06015ae8"],
        b"*1\r\n:0\r\n",
    ),
    (
        "script kill idle",
        ["SCRIPT", "KILL"],
        b"-NOTBUSY No scripts in execution right now.\r\n",
    ),
    (
        "script unknown",
        ["SCRIPT", "NOPE"],
        b"-ERR unknown subcommand 'NOPE'. Try SCRIPT HELP.\r\n",
    ),
    (
        "function flush",
        ["FUNCTION", "FLUSH"],
        b"+OK\r\n",
    ),
    (
        "function load",
        [
            "FUNCTION",
            "LOAD",
            (
                "#!lua name=mylib\nredis.register_function('myfunc', function("
                "keys, args) return {keys[1], args[1]} end)\nredis.register_fu"
                "nction{function_name='ro', callback=function(keys, args) ret"
                "urn redis.call('exists', keys[1]) end, flags={'no-writes'}, "
                "description='reads'}"
            ),
        ],
        b"$5\r\nmylib\r\n",
    ),
    (
        "function load exists",
        [
            "FUNCTION",
            "LOAD",
            "#!lua name=mylib\nredis.register_function('myfunc', function() return 1 end)",
        ],
        b"-ERR Library 'mylib' already exists\r\n",
    ),
    (
        "function load no metadata",
        ["FUNCTION", "LOAD", "return 1"],
        b"-ERR Missing library metadata\r\n",
    ),
    (
        "function load no name",
        ["FUNCTION", "LOAD", "#!lua\nreturn 1"],
        b"-ERR Library name was not given\r\n",
    ),
    (
        "function load bad engine",
        ["FUNCTION", "LOAD", "#!js name=x\nreturn 1"],
        b"-ERR Engine 'js' not found\r\n",
    ),
    (
        "function load bad name",
        ["FUNCTION", "LOAD", "#!lua name=a-b\nreturn 1"],
        (
            b"-ERR Library names can only contain letters, numbers, or und"
            b"erscores(_) and must be at least one character long\r\n"
        ),
    ),
    (
        "function load nothing registered",
        ["FUNCTION", "LOAD", "#!lua name=empty\nlocal x = 1"],
        b"-ERR No functions registered\r\n",
    ),
    (
        "function load compile error",
        ["FUNCTION", "LOAD", "#!lua name=bad\nreturn +"],
        b"-ERR Error compiling function: user_function:2: unexpected symbol near '+'\r\n",
    ),
    (
        "function load runtime error",
        ["FUNCTION", "LOAD", "#!lua name=bad\nerror('nope')"],
        (
            b"-ERR Error registering functions: ERR user_function:2: Scrip"
            b"t attempted to access nonexistent global variable 'error'\r\n"
        ),
    ),
    (
        "function load call refused",
        ["FUNCTION", "LOAD", "#!lua name=bad\nredis.call('ping')"],
        (
            b"-ERR Error registering functions: ERR user_function:2: Scrip"
            b"t attempted to access nonexistent global variable 'call'\r\n"
        ),
    ),
    (
        "function load duplicate function",
        [
            "FUNCTION",
            "LOAD",
            "#!lua name=other\nredis.register_function('myfunc', function() return 1 end)",
        ],
        b"-ERR Function myfunc already exists\r\n",
    ),
    (
        "function load bad option",
        ["FUNCTION", "LOAD", "NOW", "#!lua name=x\nreturn 1"],
        b"-ERR Unknown option given: NOW\r\n",
    ),
    (
        "fcall",
        ["FCALL", "myfunc", "1", "k", "a"],
        b"*2\r\n$1\r\nk\r\n$1\r\na\r\n",
    ),
    (
        "fcall with many arguments",
        ["FCALL", "myfunc", "300", *(f"k{n}" for n in range(300)), "a"],
        b"*2\r\n$2\r\nk0\r\n$1\r\na\r\n",
    ),
    (
        "fcall missing",
        ["FCALL", "nofunc", "0"],
        b"-ERR Function not found\r\n",
    ),
    (
        "fcall bad numkeys",
        ["FCALL", "myfunc", "x"],
        b"-ERR Bad number of keys provided\r\n",
    ),
    (
        "fcall_ro write function",
        ["FCALL_RO", "myfunc", "0"],
        b"-ERR Can not execute a script with write flag using *_ro command.\r\n",
    ),
    (
        "fcall_ro no-writes function",
        ["FCALL_RO", "ro", "1", "k"],
        b":0\r\n",
    ),
    (
        "function list",
        ["FUNCTION", "LIST"],
        (
            b"*1\r\n*6\r\n$12\r\nlibrary_name\r\n$5\r\nmylib\r\n$6\r\nengine\r\n$3\r\nLUA\r\n$"
            b"9\r\nfunctions\r\n*2\r\n*6\r\n$4\r\nname\r\n$6\r\nmyfunc\r\n$11\r\ndescription"
            b"\r\n$-1\r\n$5\r\nflags\r\n*0\r\n*6\r\n$4\r\nname\r\n$2\r\nro\r\n$11\r\ndescription"
            b"\r\n$5\r\nreads\r\n$5\r\nflags\r\n*1\r\n+no-writes\r\n"
        ),
    ),
    (
        "function list withcode pattern",
        ["FUNCTION", "LIST", "LIBRARYNAME", "my*", "WITHCODE"],
        (
            b"*1\r\n*8\r\n$12\r\nlibrary_name\r\n$5\r\nmylib\r\n$6\r\nengine\r\n$3\r\nLUA\r\n$"
            b"9\r\nfunctions\r\n*2\r\n*6\r\n$4\r\nname\r\n$6\r\nmyfunc\r\n$11\r\ndescription"
            b"\r\n$-1\r\n$5\r\nflags\r\n*0\r\n*6\r\n$4\r\nname\r\n$2\r\nro\r\n$11\r\ndescription"
            b"\r\n$5\r\nreads\r\n$5\r\nflags\r\n*1\r\n+no-writes\r\n$12\r\nlibrary_code\r\n$"
            b"260\r\n#!lua name=mylib\nredis.register_function('myfunc', func"
            b"tion(keys, args) return {keys[1], args[1]} end)\nredis.regist"
            b"er_function{function_name='ro', callback=function(keys, args"
            b") return redis.call('exists', keys[1]) end, flags={'no-write"
            b"s'}, description='reads'}\r\n"
        ),
    ),
    (
        "function list no match",
        ["FUNCTION", "LIST", "LIBRARYNAME", "zz*"],
        b"*0\r\n",
    ),
    (
        "function list bad",
        ["FUNCTION", "LIST", "LIBRARYNAME"],
        b"-ERR library name argument was not given\r\n",
    ),
    (
        "function stats",
        ["FUNCTION", "STATS"],
        (
            b"*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n"
            b"$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:2\r\n"
        ),
    ),
    (
        "function replace",
        [
            "FUNCTION",
            "LOAD",
            "REPLACE",
            "#!lua name=mylib\nredis.register_function('myfunc', function() return 'replaced' end)",
        ],
        b"$5\r\nmylib\r\n",
    ),
    (
        "fcall replaced",
        ["FCALL", "myfunc", "0"],
        b"$8\r\nreplaced\r\n",
    ),
    (
        "fcall old function gone",
        ["FCALL", "ro", "0"],
        b"-ERR Function not found\r\n",
    ),
    (
        "function delete",
        ["FUNCTION", "DELETE", "mylib"],
        b"+OK\r\n",
    ),
    (
        "function delete missing",
        ["FUNCTION", "DELETE", "mylib"],
        b"-ERR Library not found\r\n",
    ),
    (
        "function kill idle",
        ["FUNCTION", "KILL"],
        b"-NOTBUSY No scripts in execution right now.\r\n",
    ),
    (
        "function flush bad",
        ["FUNCTION", "FLUSH", "NOW"],
        b"-ERR FUNCTION FLUSH only supports SYNC|ASYNC option\r\n",
    ),
]
"""(what it shows, the request, redis-server's reply), in the order they run."""


@pytest.fixture
def peer() -> Peer:
    return Peer(Broker(Config()))


def test_replies_as_redis_server_gives_them(peer: Peer) -> None:
    for name, args, expected in CASES:
        assert (name, peer.send(*args)) == (name, expected)


RESP3_CASES: list[tuple[str, list[str], bytes]] = [
    (
        "true in RESP3",
        ["EVAL", "return true", "0"],
        b":1\r\n",
    ),
    (
        "false under RESP2 script",
        ["EVAL", "return false", "0"],
        b"_\r\n",
    ),
    (
        "false under setresp 3",
        ["EVAL", "redis.setresp(3) return false", "0"],
        b"#f\r\n",
    ),
    (
        "nil",
        ["EVAL", "return nil", "0"],
        b"_\r\n",
    ),
    (
        "double",
        ["EVAL", "return {double=3.5}", "0"],
        b",3.5\r\n",
    ),
    (
        "double integral",
        ["EVAL", "return {double=3}", "0"],
        b",3\r\n",
    ),
    (
        "big number",
        ["EVAL", "return {big_number='123456789012345678901234567890'}", "0"],
        b"(123456789012345678901234567890\r\n",
    ),
    (
        "map",
        ["EVAL", "return {map={a=1}}", "0"],
        b"%1\r\n$1\r\na\r\n:1\r\n",
    ),
    (
        "set",
        ["EVAL", "return {set={a=true}}", "0"],
        b"~1\r\n$1\r\na\r\n",
    ),
    (
        "verbatim",
        ["EVAL", "return {verbatim_string={format='txt', string='hello'}}", "0"],
        b"=9\r\ntxt:hello\r\n",
    ),
    (
        "stream for xinfo",
        ["XADD", "rs", "1-1", "f", "v"],
        b"$3\r\n1-1\r\n",
    ),
    (
        "map reply to lua",
        [
            "EVAL",
            (
                "redis.setresp(3) local r = redis.call('xinfo', 'stream', KEY"
                "S[1]) return {type(r.map), r.map['length']}"
            ),
            "1",
            "rs",
        ],
        b"*2\r\n$5\r\ntable\r\n:1\r\n",
    ),
    (
        "map reply passes back",
        [
            "EVAL",
            (
                "redis.setresp(3) local r = redis.call('xinfo', 'stream', KEY"
                "S[1]) return r.map['first-entry']"
            ),
            "1",
            "rs",
        ],
        b"*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n",
    ),
    (
        "resp2 map is array",
        [
            "EVAL",
            "redis.setresp(2) local r = redis.call('xinfo', 'stream', KEYS[1]) return {r[1], r[2]}",
            "1",
            "rs",
        ],
        b"*2\r\n$6\r\nlength\r\n:1\r\n",
    ),
    (
        "null under resp3 is nil",
        [
            "EVAL",
            "redis.setresp(3) return tostring(redis.call('xadd', 'nokey', 'NOMKSTREAM', '*', 'f', 'v'))",
            "0",
        ],
        b"$3\r\nnil\r\n",
    ),
    (
        "null under resp2 is false",
        [
            "EVAL",
            "redis.setresp(2) return tostring(redis.call('xadd', 'nokey', 'NOMKSTREAM', '*', 'f', 'v'))",
            "0",
        ],
        b"$5\r\nfalse\r\n",
    ),
    (
        "status under resp3",
        ["EVAL", "redis.setresp(3) return redis.call('ping')", "0"],
        b"+PONG\r\n",
    ),
    (
        "error under resp3",
        ["EVAL", "redis.setresp(3) return redis.pcall('nope')", "0"],
        b"-ERR Unknown Redis command called from script\r\n",
    ),
    (
        "function list in resp3",
        ["FUNCTION", "LIST"],
        b"*0\r\n",
    ),
    (
        "function stats in resp3",
        ["FUNCTION", "STATS"],
        (
            b"%2\r\n$14\r\nrunning_script\r\n_\r\n$7\r\nengines\r\n%1\r\n$3\r\nLUA\r\n%2\r\n$1"
            b"5\r\nlibraries_count\r\n:0\r\n$15\r\nfunctions_count\r\n:0\r\n"
        ),
    ),
]
"""As ``CASES``, on a connection that said HELLO 3 first."""


def test_resp3_replies_as_redis_server_gives_them(peer: Peer) -> None:
    peer.send("HELLO", "3")
    for name, args, expected in RESP3_CASES:
        assert (name, peer.send(*args)) == (name, expected)


def test_function_names_are_found_in_any_case_and_collide_in_any_case(peer: Peer) -> None:
    code = "#!lua name={}\nredis.register_function('{}', function() return '{}' end)"
    assert peer.send("FUNCTION", "LOAD", code.format("one", "Test", "first")) == b"$3\r\none\r\n"
    assert peer.send("FCALL", "TEST", "0") == b"$5\r\nfirst\r\n"
    assert peer.send("FCALL", "test", "0") == b"$5\r\nfirst\r\n"
    assert peer.send("FUNCTION", "LOAD", code.format("two", "tEST", "x")) == (
        b"-ERR Function tEST already exists\r\n"
    )
    assert peer.send("FUNCTION", "FLUSH", "SYNC", "x") == (
        b"-ERR unknown subcommand or wrong number of arguments for 'FLUSH'. Try FUNCTION HELP.\r\n"
    )


def test_the_sandbox_keeps_python_and_the_real_globals_out_of_reach(peer: Peer) -> None:
    escapes = [
        "return python",
        "return getfenv(0).python",
        "return getfenv(redis.call)",
        "return redis.call.__class__",
        "return rawget(getfenv(0), 'os')",
        "return loadstring('return io')()",
        "return getmetatable('').__index.rep == string.rep and 'same' or 'other'",
        "return tostring(getmetatable(redis.call))",
        "local ok, e = pcall(function() return redis.call.__class__ end) return type(e)",
        "local ok, e = xpcall(function() redis.call('nope') end, function(e) return e end) "
        "return type(e)",
        "return coroutine.resume(coroutine.create(function() return os end))",
    ]
    replies = [peer.send("EVAL", script, "0") for script in escapes]
    for reply in replies:
        assert b"python" not in reply.lower() or b"nonexistent global variable 'python'" in reply
        assert b"<" not in reply  # (no Python object's repr)
    assert replies[0].startswith(b"-ERR user_script:1: Script attempted to access nonexistent")
    assert replies[2].startswith(b"-ERR user_script:1: bad argument #1 to 'getfenv'")
    assert replies[3].startswith(b"-ERR not accessible")
    assert replies[4] == b"$-1\r\n"
    assert replies[7] == b"$5\r\nfalse\r\n"
    assert replies[8:10] == [b"$6\r\nstring\r\n", b"$5\r\ntable\r\n"]
    assert replies[10] == b"$-1\r\n"  # (false: the coroutine could not reach ``os`` either)


def test_what_a_script_cannot_break(peer: Peer) -> None:
    peer.conn.broker.scripts.max_memory = 16 * 1024 * 1024  # (reached sooner)
    # memory blow-up, stack overflow, a cyclic table, a huge loop of calls: replies, no crash
    hog = peer.send("EVAL", "return string.rep('x', 2^30)", "0")
    assert hog.endswith(b", not enough memory\r\n")
    assert b"stack overflow" in peer.send("EVAL", "local function f() return 1 + f() end f()", "0")
    cyclic = peer.send("EVAL", "local t = {} t[1] = t return t", "0")
    assert cyclic.endswith(b"-ERR reached lua stack limit\r\n")
    assert peer.send("EVAL", "for i = 1, 1000 do redis.call('ping') end return 1", "0") == b":1\r\n"
    assert peer.send("PING") == b"+PONG\r\n"


def test_a_scripts_writes_are_checked_as_redis_checks_them(peer: Peer) -> None:
    broker = peer.conn.broker
    watcher = Peer(broker)
    assert watcher.send("WATCH", "s") == b"+OK\r\n"
    assert peer.send("EVAL", "return redis.call('xadd', KEYS[1], '1-1', 'f', 'v')", "1", "s") == (
        b"$3\r\n1-1\r\n"
    )
    watcher.send("MULTI")
    watcher.send("XLEN", "s")
    assert watcher.send("EXEC") == b"*-1\r\n"  # (the script's write spoiled the transaction)
    peer.send("MULTI")
    assert peer.send("EVAL", "return redis.call('xlen', KEYS[1])", "1", "s") == b"+QUEUED\r\n"
    assert peer.send("EXEC") == b"*1\r\n:1\r\n"
    broker.keyspaces.maxmemory = 1  # (past it: the stream holds more)
    oom = b"-ERR OOM command not allowed when used memory > 'maxmemory'. script: "
    assert peer.send("EVAL", "return redis.call('xadd', KEYS[1], '*', 'f', 'v')", "1", "s").startswith(
        oom.replace(b"-ERR ", b"-")
    )
    assert peer.send("EVAL", "return redis.call('xlen', KEYS[1])", "1", "s") == b":1\r\n"
    assert peer.send("EVAL", "return redis.call('del', KEYS[1])", "1", "s") == b":1\r\n"
    # (an empty node still holds its baseline: past 1 byte, as redis-server always is; a script that
    # may write is refused as any command that may add data is)
    assert peer.send("EVAL", "#!lua\nreturn 1", "0") == (
        b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
    )
    assert peer.send("EVAL", "#!lua flags=no-writes\nreturn 1", "0") == b":1\r\n"
    broker.keyspaces.maxmemory = 0
    assert peer.send("EVAL", "#!lua\nreturn 1", "0") == b":1\r\n"


def test_a_library_whose_code_runs_too_long_is_refused(peer: Peer) -> None:
    spin = "#!lua name=test\nlocal a = 1\nwhile 1 do a = a + 1 end"
    assert peer.send("FUNCTION", "LOAD", spin) == (
        b"-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n"
    )
    assert peer.send("FUNCTION", "LIST") == b"*0\r\n"


def test_metadata_words_are_split_as_redis_splits_them(peer: Peer) -> None:
    quoted = "#!lua name=\"foo\"\nredis.register_function('foo', function() return 1 end)"
    assert peer.send("FUNCTION", "LOAD", "REPLACE", quoted) == b"$3\r\nfoo\r\n"
    unbalanced = "#!lua name=\"foo\nredis.register_function('foo', function() return 1 end)"
    assert peer.send("FUNCTION", "LOAD", unbalanced) == b"-ERR Invalid library metadata\r\n"
    assert peer.send("EVAL", "#!lua flags='no-writes'\nreturn 1", "0") == b":1\r\n"
    assert peer.send("EVAL", '#!lua flags="no\n', "0") == b"-ERR Invalid engine in script shebang\r\n"


@given(st.binary(max_size=40))
def test_any_shebang_line_is_an_answer(line: bytes) -> None:
    peer = Peer(Broker(Config()))
    requests: list[list[bytes | str]] = [
        ["EVAL", b"#!" + line + b"\nreturn 1", "0"],
        ["FUNCTION", "LOAD", b"#!" + line + b"\n"],
    ]
    for request in requests:
        assert peer.send(*request)[:1] in (b"-", b":", b"$")

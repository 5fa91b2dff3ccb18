-- The privileged half of a scripting runtime, run once when it starts. It is handed the host's
-- callbacks, keeps what scripts must not reach (the debug library, the raw globals, the host's
-- callbacks) in locals, and builds the sandbox scripts see as their globals: a read-only view of
-- the allowed builtins and libraries and of the ``redis`` table. It answers with the functions the
-- host calls: load, run, and the helpers that read Lua values without running metamethods.
local host = ...
local G0 = _G
local debug, error, type, tostring, tonumber, rawget, rawset, next, select = debug, error, type, tostring, tonumber, rawget, rawset, next, select
local setmetatable, getmetatable, setfenv, loadstring, xpcall, pcall = setmetatable, getmetatable, setfenv, loadstring, xpcall, pcall
local newproxy, math, string, table, coroutine, unpack = newproxy, math, string, table, coroutine, unpack
local maxn = table.maxn
local sethook, getinfo = debug.sethook, debug.getinfo
local PRELUDE = getinfo(1, 'S').source
-- Functions made from here on read no globals; what getfenv shows of them is an empty table.
setfenv(1, {})

local READONLY = 'Attempt to modify a readonly table'
local protected = setmetatable({}, {__mode = 'k'})

local function readonly_error()
  error(READONLY, 2)
end

-- A read-only view of ``t``: reads go to ``t``; writes, rawset and setmetatable are refused.
local function readonly(t)
  local view = {}
  local mt = {__index = t, __newindex = readonly_error}
  local shown = {}
  setmetatable(shown, {__index = mt, __newindex = readonly_error, __metatable = false})
  mt.__metatable = shown
  setmetatable(view, mt)
  protected[view] = true
  protected[shown] = true
  return view
end

local function argument_error(n, name, expected, value)
  error(("bad argument #%d to '%s' (%s expected, got %s)"):format(n, name, expected, type(value)), 3)
end

local function checked_rawset(t, k, v)
  if type(t) ~= 'table' then argument_error(1, 'rawset', 'table', t) end
  if protected[t] then error(READONLY, 0) end
  return rawset(t, k, v)
end

local function checked_setmetatable(t, mt)
  if type(t) ~= 'table' then argument_error(1, 'setmetatable', 'table', t) end
  if mt ~= nil and type(mt) ~= 'table' then error("bad argument #2 to 'setmetatable' (nil or table expected)", 2) end
  if protected[t] then error(READONLY, 0) end
  return setmetatable(t, mt)
end

local function copy(t)
  local c = {}
  for k, v in next, t do c[k] = v end
  return c
end

-- redis.call and redis.pcall are the host's own callables (called as C functions are, so a
-- script's ``return redis.call(...)`` keeps its frame for the error's line). redis.call raises a
-- host error for an error reply; ``normalize`` turns such an error into its table wherever one is
-- caught, so that scripts only ever see the table.
local error_of = host.error_of
local function normalize(e)
  if type(e) == 'userdata' then
    local t = error_of(e)
    if t ~= nil then return t end
  end
  return e
end
local host_log = host.log

local function err_table(text)
  if type(text) ~= 'string' then return {err = 'ERR wrong number or type of arguments'} end
  return host.error_table(text)
end

local redis = {
  call = host.call,
  pcall = host.pcall,
  sha1hex = function(...)
    if select('#', ...) ~= 1 then error({err = 'ERR wrong number of arguments'}) end
    return host.sha1hex(...)
  end,
  error_reply = function(...)
    if select('#', ...) ~= 1 or type((...)) ~= 'string' then
      return {err = 'ERR wrong number or type of arguments'}
    end
    local text = ...
    if text:sub(1, 1) ~= '-' then text = '-' .. text end
    return err_table(text)
  end,
  status_reply = function(...)
    if select('#', ...) ~= 1 or type((...)) ~= 'string' then
      return {err = 'ERR wrong number or type of arguments'}
    end
    return {ok = (...)}
  end,
  log = function(...)
    local n = select('#', ...)
    if n < 2 then error({err = 'ERR redis.log() requires two arguments or more.'}) end
    local ok, failure = host_log(...)
    if not ok then error({err = failure}) end
  end,
  setresp = function(...)
    if select('#', ...) ~= 1 then error({err = 'ERR redis.setresp() requires one argument.'}) end
    if not host.setresp(...) then error({err = 'ERR RESP version must be 2 or 3.'}) end
  end,
  set_repl = function(...)
    if select('#', ...) ~= 1 then error({err = 'ERR redis.set_repl() requires one argument.'}) end
    local flags = tonumber((...))
    if flags == nil or flags < 0 or flags > 3 or flags % 1 ~= 0 then
      error({err = 'ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.'})
    end
  end,
  replicate_commands = function() return true end,
  breakpoint = function() return false end,
  debug = function() end,
  acl_check_cmd = function(...)
    local ok, value = host.acl_check(...)
    if not ok then error(value) end
    return value
  end,
  REDIS_VERSION = host.version,
  REDIS_VERSION_NUM = host.version_num,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
}

-- Lua's pcall, as redis-server changes it: an error raised as a table with an ``err`` string
-- (what redis.call raises) comes back as that string.
local lua_pcall = pcall
local function pcall_result(ok, ...)
  if ok then return ok, ... end
  local e = normalize((...))
  if type(e) == 'table' then
    local text = rawget(e, 'err')
    if type(text) == 'string' or type(text) == 'number' then return false, text end
  end
  return false, e
end
local function script_pcall(...)
  return pcall_result(lua_pcall(...))
end
local function script_xpcall(f, h)
  return xpcall(f, function(e) return h(normalize(e)) end)
end
local coroutine_lib = copy(coroutine)
local resume = coroutine.resume
local function resumed(ok, ...)
  if ok then return ok, ... end
  return false, normalize((...))
end
coroutine_lib.resume = function(co, ...) return resumed(resume(co, ...)) end
coroutine_lib.wrap = function(f)
  local co = coroutine.create(f)
  local function unwrap(ok, ...)
    if ok then return ... end
    error(normalize((...)), 0)
  end
  return function(...) return unwrap(resume(co, ...)) end
end
-- (The host's callables share one metatable: scripts may not change it.)
getmetatable(host.call).__metatable = false

local math_lib = copy(math)
math_lib.random = function(...) return host.random(...) end
math_lib.randomseed = function(seed)
  seed = tonumber(seed)
  if seed == nil then error("bad argument #1 to 'randomseed' (number expected)", 2) end
  host.randomseed(seed)
end

local string_lib = readonly(copy(string))

-- A library of the host's: each function answers (ok, value); a failure is raised where the
-- script called it.
local function wrap_library(functions)
  local wrapped = {}
  for name, f in next, functions do
    wrapped[name] = function(...)
      local results = {f(...)}
      if not results[1] then error(results[2], 2) end
      return unpack(results, 2, maxn(results))
    end
  end
  return wrapped
end
local null = newproxy(false)
local cjson = wrap_library(host.cjson)
cjson.null = null

-- What a script returns, as the reply redis-server makes of it: ``caller`` is the protocol the
-- client speaks (2 or 3), ``own`` the script's (``redis.setresp``), which decides what a boolean
-- becomes in RESP2. Tables nested deeper than MAX_DEPTH end in an error, as redis-server's Lua
-- stack limit ends them.
local MAX_DEPTH = 1000
local format, gsub, len, match, find, floor = string.format, string.gsub, string.len, string.match, string.find, math.floor
local concat = table.concat
local format_double = host.format_double

local function line(text)
  if not find(text, '\r', 1, true) and not find(text, '\n', 1, true) then return text end
  return (gsub(text, '[\r\n]', ' '))
end
-- Status and error texts are C strings there: they end at the first zero byte.
local function c_string(text)
  if not find(text, '\0', 1, true) then return text end
  return (match(text, '^[^%z]*'))
end

local host_resp = host.resp

-- The reply of ``value`` when it is a string, number, boolean, nil or a table of one of the
-- special kinds (err, ok, double, big_number, verbatim_string); nil for an array, map or set.
-- (``own`` is asked of the host when a boolean first needs it.)
local function flat(value, caller, own)
  local t = type(value)
  if t == 'string' then
    return '$' .. len(value) .. '\r\n' .. value .. '\r\n'
  elseif t == 'number' then
    return format(':%d\r\n', value)
  elseif t == 'boolean' then
    if own == nil then own = host_resp() end
    if own == 2 then
      return value and ':1\r\n' or (caller == 3 and '_\r\n' or '$-1\r\n')
    elseif caller == 3 then
      return value and '#t\r\n' or '#f\r\n'
    end
    return value and ':1\r\n' or ':0\r\n'
  elseif t ~= 'table' then
    return caller == 3 and '_\r\n' or '$-1\r\n'
  end
  local field = rawget(value, 'err')
  if type(field) == 'string' then
    -- (an error's text loses the line ends it ends with, then its other CRs and LFs become blanks)
    local text = gsub('-' .. c_string(field), '[\r\n]+$', '')
    return line(text) .. '\r\n'
  end
  field = rawget(value, 'ok')
  if type(field) == 'string' then
    return '+' .. line(c_string(field)) .. '\r\n'
  end
  field = rawget(value, 'double')
  if type(field) == 'number' then
    local text = format_double(field)
    return caller == 3 and (',' .. text .. '\r\n') or ('$' .. len(text) .. '\r\n' .. text .. '\r\n')
  end
  field = rawget(value, 'big_number')
  if type(field) == 'string' then
    local text = line(field)
    return caller == 3 and ('(' .. text .. '\r\n') or ('$' .. len(text) .. '\r\n' .. text .. '\r\n')
  end
  field = rawget(value, 'verbatim_string')
  if type(field) == 'table' then
    local kind, text = rawget(field, 'format'), rawget(field, 'string')
    if type(kind) == 'string' and type(text) == 'string' then
      if caller == 3 then
        return '=' .. (len(text) + 4) .. '\r\n' .. format('%-3.3s', kind) .. ':' .. text .. '\r\n'
      end
      return '$' .. len(text) .. '\r\n' .. text .. '\r\n'
    end
  end
  return nil
end

local serialize

-- The reply of the array, map or set ``value`` (a table ``flat`` answered nil for), added to
-- ``out``.
local function aggregate(value, caller, own, depth, out)
  local nested = depth + 1
  local field = rawget(value, 'map')
  if type(field) == 'table' then
    local at, n = #out + 1, 0
    out[at] = false
    for k, v in next, field do
      serialize(k, caller, own, nested, out)
      serialize(v, caller, own, nested, out)
      n = n + 1
    end
    out[at] = caller == 3 and ('%' .. n .. '\r\n') or ('*' .. (2 * n) .. '\r\n')
    return
  end
  field = rawget(value, 'set')
  if type(field) == 'table' then
    local at, n = #out + 1, 0
    out[at] = false
    for k in next, field do
      serialize(k, caller, own, nested, out)
      n = n + 1
    end
    out[at] = (caller == 3 and '~' or '*') .. n .. '\r\n'
    return
  end
  local at, n = #out + 1, 0
  out[at] = false
  while true do
    local item = rawget(value, n + 1)
    if item == nil then break end
    serialize(item, caller, own, nested, out)
    n = n + 1
  end
  out[at] = '*' .. n .. '\r\n'
end

function serialize(value, caller, own, depth, out)
  if depth >= MAX_DEPTH and type(value) == 'table' then
    out[#out + 1] = '-ERR reached lua stack limit\r\n'
    return
  end
  local text = flat(value, caller, own)
  if text ~= nil then
    out[#out + 1] = text
    return
  end
  aggregate(value, caller, own, depth, out)
end

local function reply(value, caller, own)
  local text = flat(value, caller, own)
  if text ~= nil then return text end
  local out = {}
  aggregate(value, caller, own, 0, out)
  return concat(out)
end

-- What scripts see as globals.
local visible = {}
for _, name in next, {
  'xpcall', 'tostring', 'getfenv', 'next', 'assert', 'tonumber', 'rawequal', 'collectgarbage',
  'getmetatable', 'type', 'select', 'unpack', 'gcinfo', 'pairs', 'rawget', 'loadstring',
  'ipairs', '_VERSION', 'setfenv', 'load', 'error', 'newproxy'} do
  visible[name] = G0[name]
end
-- Binary chunks are refused (the bytecode verifier of Lua 5.1 is not safe).
local function binary(text)
  return type(text) == 'string' and text:byte(1) == 27
end
visible.loadstring = function(text, name)
  if binary(text) then return nil, 'binary chunks are not allowed' end
  return loadstring(text, name)
end
visible.load = function(reader, name)
  local parts = {}
  while true do
    local part = reader()
    if part == nil or part == '' then break end
    if type(part) ~= 'string' then return nil, 'reader function must return a string' end
    parts[#parts + 1] = part
  end
  return visible.loadstring(table.concat(parts), name or '=(load)')
end
visible.pcall = script_pcall
visible.rawset = checked_rawset
visible.setmetatable = checked_setmetatable
visible.string = string_lib
visible.math = readonly(math_lib)
visible.table = readonly(copy(table))
visible.coroutine = readonly(coroutine_lib)
visible.xpcall = script_xpcall
visible.bit = readonly(wrap_library(host.bit))
visible.cjson = readonly(cjson)
visible.cmsgpack = readonly(wrap_library(host.cmsgpack))
visible.struct = readonly(wrap_library(host.struct))
visible.redis = readonly(redis)

-- What a FUNCTION LOAD's code sees while it runs: only ``redis``, holding the library API; any
-- other name is an error.
local function strict(t)
  local view = {}
  local mt = {__newindex = readonly_error, __metatable = readonly({})}
  mt.__index = function(_, name)
    local value = t[name]
    if value == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end
  protected[view] = true
  return setmetatable(view, mt)
end
local registering, registered = nil, nil
local function callback_of(...)
  if select('#', ...) == 2 then return (select(2, ...)) end
  for k, v in next, (...) do
    if type(k) == 'string' and k:lower() == 'callback' then return v end
  end
end
local library_globals = {redis = strict({
  register_function = function(...)
    if registering == nil then
      error({err = 'ERR redis.register_function can only be called on FUNCTION LOAD command'})
    end
    local failure, name = registering(...)
    if failure then error({err = failure}) end
    registered[name] = callback_of(...)
  end,
  log = redis.log,
  REDIS_VERSION = redis.REDIS_VERSION, REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
})}

local globals = {}
local current = visible
local eval_keys, eval_argv = nil, nil  -- KEYS and ARGV while an EVAL runs
local globals_mt = {
  __index = function(_, name)
    local value
    if name == 'KEYS' then value = eval_keys elseif name == 'ARGV' then value = eval_argv end
    if value == nil then value = current[name] end
    if value == nil then
      if name == '_G' then return globals end
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = readonly_error,
}
local shown = readonly({})
globals_mt.__metatable = shown
setmetatable(globals, globals_mt)
protected[globals] = true

-- The string metatable's __index is the read-only string library.
local string_mt = getmetatable('')
string_mt.__index = string_lib
string_mt.__metatable = readonly({__index = string_lib})

-- Scripts run in a coroutine whose globals are the sandbox (the runtime's own thread keeps the
-- real globals, which the host needs); what they load sees the sandbox too.
setfenv(1, globals)

local function handler(err)
  err = normalize(err)
  local level = 2
  local i = getinfo(level, 'nSl')
  if i and i.what == 'C' then
    level = level + 1
    i = getinfo(level, 'nSl')
  end
  while i and i.source == PRELUDE do
    level = level + 1
    i = getinfo(level, 'nSl')
  end
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if i then
    rawset(err, 'source', i.source)
    rawset(err, 'line', i.currentline)
  end
  return err
end

-- The count the worker's hook is set to (0: none; -1: a kill replaced it). The hook stays set
-- between runs, so its count runs on from one run to the next.
local hooked = 0
local hook_fn = nil
local function tick()
  local stop = host.tick()
  if stop then
    sethook(hook_fn, 'l')
    hooked = -1
    error({err = stop})
  end
end
hook_fn = tick

-- The outcome of a run: true and the reply, or false and the error table.
local function finish(caller, resumed, ok, value)
  eval_keys, eval_argv = nil, nil
  if not resumed then return false, {err = 'ERR ' .. tostring(ok)} end
  if not ok then return false, value end
  return true, reply(value, caller, nil)
end

-- Scripts run in one long-lived coroutine whose globals are the sandbox (the host keeps what it
-- was handed from inside a coroutine only while that coroutine lives, so it must outlive them).
-- Each job is a function and its arguments; the worker answers xpcall's outcome and waits for the
-- next one. A worker that died (which only a fault of this file could cause) is replaced.
local yield = coroutine.yield
local function work(f, n, args)
  setfenv(0, globals)
  while true do
    if n == 0 then  -- (an EVAL script: called as it is, its first value used)
      f, n, args = yield(xpcall(f, handler))
    else
      f, n, args = yield(xpcall(function() return (f(unpack(args, 1, n))) end, handler))
    end
  end
end
local worker = nil

-- Run ``f(...)`` in the worker, with the count hook set to ``hook`` instructions (0: none).
local function sandboxed(caller, hook, f, ...)
  if worker == nil or coroutine.status(worker) == 'dead' then
    worker, hooked = coroutine.create(work), 0
    resume(worker)
  end
  if hook ~= hooked then
    if hook > 0 then sethook(worker, hook_fn, '', hook) else sethook(worker) end
    hooked = hook
  end
  local n = select('#', ...)
  return finish(caller, resume(worker, f, n, n > 0 and {...} or nil))
end

local api = {}

-- Compile ``body`` as a chunk called ``name``: the function, or nil and the message.
function api.load(body, name)
  if binary(body) then return nil, 'binary chunks are not allowed' end
  local f, message = loadstring(body, name)
  if not f then return nil, message end
  setfenv(f, globals)
  return f
end

-- KEYS and ARGV from a run's arguments: ``nkeys`` and the keys then the other arguments, or -1
-- and the two tables.
local function split(nkeys, ...)
  if nkeys < 0 then return ... end
  local argv, keys = {...}, {}
  if nkeys > 0 then
    local n = select('#', ...)
    for i = 1, nkeys do keys[i] = argv[i] end
    for i = 1, n - nkeys do argv[i] = argv[i + nkeys] end
    for i = n - nkeys + 1, n do argv[i] = nil end
  end
  return keys, argv
end

-- Run a compiled EVAL script with KEYS and ARGV: true and its value, or false and the error table.
function api.run_eval(caller, fn, hook, ...)
  local keys, argv = split(...)
  eval_keys, eval_argv = keys, argv
  return sandboxed(caller, hook, fn)
end

-- Run a registered function with its keys and arguments.
function api.run_function(caller, fn, hook, ...)
  return sandboxed(caller, hook, fn, split(...))
end

-- Run a library's code with the library API as ``redis``; ``register`` checks each registration
-- (answering nil and the function's name, or the error's text). Answers whether the code ran, and
-- the table of the functions it registered by name (or the error).
function api.run_library(fn, register, hook)
  registering, registered = register, {}
  current = library_globals
  local ok, err = sandboxed(2, hook, fn)
  local functions = registered
  registering, registered = nil, nil
  current = visible
  if not ok then return false, err end
  return true, functions
end

api.rawget = rawget
api.next = next
api.type = type
api.null = null
return api

-- guarded_update: applies a list of operations on the caller's keys, in one step, only while
-- the caller's hold is the lock's: the lock string holds its owner id and fencing token (a
-- mutex on the native protocol: the key holds exactly its owner id). Once per update: the
-- hold's last applied update is recorded beside the lock, and a repeat of it (its reply was
-- lost and the client sent it again) answers what the first one applied without applying it
-- twice.
--
-- KEYS[1]: the hold's lock key (a lock string, or a native mutex)
-- KEYS[2]: the lock's update record, "owner|token|seq|v1,v2,..."
-- KEYS[3..]: the caller's keys, one per operation, in order
-- ARGV[1]: owner id
-- ARGV[2]: the hold's fencing token
-- ARGV[3]: the update's sequence number (increasing over the hold's updates)
-- ARGV[4]: how long the record is kept, in milliseconds (the lease left, and a margin)
-- ARGV[5..]: the operations, four arguments each (a code and three operands, unused ones
--   empty); operation i works on KEYS[2 + i]:
--   'set'  value          SET key value                 -> 1
--   'del'                 DEL key                       -> 1 deleted, 0 missing
--   'add'  n              INCRBY key n                  -> the new value
--   'take' n floor        DECRBY key n, only when value - n >= floor (a missing key is 0)
--                                                       -> the new value
--   'hset' field value    HSET key field value          -> 1 a new field, 0 replaced
--   'hadd' field n        HINCRBY key field n           -> the new value
--   'pexpire' ms          PEXPIRE key ms                -> 1 set, 0 no such key
--
-- Returns {1, v1, v2, ...}  applied (or a repeat of an applied update): each operation's value
--         {0}               the hold is not the lock's any more: nothing applied
--         {2, i, left}      operation i is a take that would go below its floor (`left` is
--                           what the key holds before it): nothing applied
-- An operation on a key of another type fails the script before anything is written (unless an
-- earlier operation of the same update gave the key that type).
local owner, token, seq = ARGV[1], ARGV[2], ARGV[3]

-- One read for the record, the lock and every counter a take or an add changes.
local reads = {KEYS[2], KEYS[1]}
for a = 5, #ARGV, 4 do
  if ARGV[a] == 'take' or ARGV[a] == 'add' then
    reads[#reads + 1] = KEYS[2 + (a - 1) / 4]
  end
end
local got = redis.call('MGET', unpack(reads))
-- What each counter held, by key (false: missing, or not a string).
local counters = {}
for r = #reads, 3, -1 do
  counters[reads[r]] = got[r]
end

local record = got[1]
if record then
  local o, t, s, values = string.match(record, '^([^|]*)|(%d+)|(%d+)|([-%d,]*)$')
  if o == owner and t == token and tonumber(s) >= tonumber(seq) then
    local answer = {1}
    for v in string.gmatch(values, '[^,]+') do
      answer[#answer + 1] = tonumber(v)
    end
    return answer
  end
end

local value = got[2]
-- A native mutex holds exactly its owner id; a lock string starts with `owner|count|token|`
-- (lock_string's format): found without parsing the rest.
local held = value == owner
if not held and value then
  local head = owner .. '|'
  if string.sub(value, 1, #head) == head then
    local at = string.find(value, '|', #head + 1, true)
    held = at ~= nil and string.sub(value, at + 1, at + #token + 1) == token .. '|'
  end
end
if not held then
  return {0}
end

-- What each counter and field will hold, checked before anything is written.
local pending = {}
local function now(slot, read)
  local n = pending[slot]
  if n == nil then
    local stored = read()
    n = tonumber(stored or '0')
    if not n then
      return nil
    end
  end
  if n == false then
    return nil
  end
  return n
end
local function not_integer(key)
  return redis.error_reply('ERR guarded update: ' .. key .. ' does not hold an integer')
end
local i = 0
for a = 5, #ARGV, 4 do
  i = i + 1
  local code, key, x, y = ARGV[a], KEYS[2 + i], ARGV[a + 1], ARGV[a + 2]
  if code == 'set' then
    pending[key] = tonumber(x) or false
  elseif code == 'del' then
    pending[key] = 0
  elseif code == 'add' or code == 'take' then
    local n = now(key, function()
      -- Not a string, or missing: GET raises WRONGTYPE for the first, answers false for the
      -- second.
      return counters[key] or redis.call('GET', key)
    end)
    if not n then
      return not_integer(key)
    end
    if code == 'take' then
      if n - tonumber(x) < tonumber(y) then
        return {2, i, n}
      end
      pending[key] = n - tonumber(x)
    else
      pending[key] = n + tonumber(x)
    end
  elseif code == 'hset' then
    redis.call('HGET', key, x)
    pending[key .. '\0' .. x] = tonumber(y) or false
  elseif code == 'hadd' then
    local slot = key .. '\0' .. x
    local n = now(slot, function() return redis.call('HGET', key, x) end)
    if not n then
      return not_integer(key .. ' ' .. x)
    end
    pending[slot] = n + tonumber(y)
  elseif code ~= 'pexpire' then
    return redis.error_reply('ERR guarded update: unknown operation ' .. tostring(code))
  end
end

local answer, values = {1}, {}
i = 0
for a = 5, #ARGV, 4 do
  i = i + 1
  local code, key, x, y = ARGV[a], KEYS[2 + i], ARGV[a + 1], ARGV[a + 2]
  local r
  if code == 'set' then
    redis.call('SET', key, x)
    r = 1
  elseif code == 'del' then
    r = redis.call('DEL', key)
  elseif code == 'add' then
    r = redis.call('INCRBY', key, x)
  elseif code == 'take' then
    r = redis.call('DECRBY', key, x)
  elseif code == 'hset' then
    r = redis.call('HSET', key, x, y)
  elseif code == 'hadd' then
    r = redis.call('HINCRBY', key, x, y)
  else
    r = redis.call('PEXPIRE', key, x)
  end
  answer[#answer + 1] = r
  values[#values + 1] = string.format('%.0f', r)
end

redis.call('SET', KEYS[2], owner .. '|' .. token .. '|' .. seq .. '|' .. table.concat(values, ','),
  'PX', ARGV[4])
return answer

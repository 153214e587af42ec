-- rw_write: take the write lock of a read-write lock, or re-enter it.
--
-- KEYS[1]: the writer, a lock string "owner|count|token|released|waiters" (see acquire.lua)
-- KEYS[2]: the readers, a hash: reader owner id -> "count|expiry (server clock, ms)"
-- KEYS[3]: the writer-waiting mark: the owner id of a writer that waits (expires by itself)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the hold count the caller believes the owner has now (0 for a fresh acquisition)
-- ARGV[4]: '1' if the caller will wait when busy
--
-- Returns as acquire.lua: token > 0 taken; -2 - ms busy (ms: when to look again); -1 busy
-- with no expiry; 0 the hold was lost. Readers whose lease ran out are dropped first. While a
-- writer waits it marks the lock so new readers hold back: writers are not starved.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local value = redis.call('GET', KEYS[1])
local owner, count, token, released, waiters = '', 0, nil, '', ''
if value then
  owner, count, token, released, waiters =
    string.match(value, '^([^|]*)|(%d+)|(%d+)|(%d*)|(1?)$')
  if not owner then
    return redis.error_reply('WRONGTYPE the lock key holds a value lock-core did not write')
  end
  count = tonumber(count)
end
local expected = tonumber(ARGV[3])
local lease = tonumber(ARGV[2])
if owner == ARGV[1] then
  if count == expected then
    local next = owner .. '|' .. (count + 1) .. '|' .. token .. '|' .. released .. '|' .. waiters
    if redis.call('PTTL', KEYS[1]) < lease then
      redis.call('SET', KEYS[1], next, 'PX', lease)
    else
      redis.call('SET', KEYS[1], next, 'KEEPTTL')
    end
  elseif count ~= expected + 1 then
    return 0
  end
  return tonumber(token)
end
if expected ~= 0 then
  return 0
end
local wait_ms = nil
if owner ~= '' then
  if ARGV[4] == '1' and waiters == '' then
    redis.call('SET', KEYS[1], value .. '1', 'KEEPTTL')
  end
  local pttl = redis.call('PTTL', KEYS[1])
  wait_ms = pttl >= 0 and pttl or nil
  if pttl < 0 then
    return -1
  end
else
  local readers = redis.call('HGETALL', KEYS[2])
  for i = 1, #readers, 2 do
    local expiry = tonumber(string.match(readers[i + 1], '|(%d+)$'))
    if expiry <= now then
      redis.call('HDEL', KEYS[2], readers[i])
    else
      local left = expiry - now
      if not wait_ms or left < wait_ms then
        wait_ms = left
      end
    end
  end
end
if wait_ms then
  if ARGV[4] == '1' then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', math.min(lease, 60000))
  end
  return -2 - wait_ms
end
if token then
  token = string.format('%.0f', tonumber(token) + 1)
else
  token = t[1] .. string.format('%06d', tonumber(t[2]))
end
-- Readers held back by a waiting writer's mark wait for this writer's release: flag it.
local flag = ''
local mark = redis.call('GET', KEYS[3])
if mark then
  flag = '1'
  if mark == ARGV[1] then
    redis.call('DEL', KEYS[3])
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|1|' .. token .. '|' .. released .. '|' .. flag, 'PX', lease)
return tonumber(token)

-- rw_write: take the write lock of a read-write lock, or re-enter it.
--
-- KEYS[1]: the writer, a lock string
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
local now = ms(t)
local lease = tonumber(ARGV[2])
local answer, value, owner, token, released, waiters =
  start_acquire(KEYS[1], ARGV[1], tonumber(ARGV[3]), lease)
if answer then
  return answer
end
local wait_ms = nil
if owner ~= '' then
  local answer = busy(KEYS[1], value, waiters, ARGV[4])
  if answer == -1 then
    return -1
  end
  wait_ms = -2 - answer
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
token = next_token(token, t)
-- Readers held back by a waiting writer's mark wait for this writer's release: flag it.
local flag = ''
local mark = redis.call('GET', KEYS[3])
if mark then
  flag = '1'
  if mark == ARGV[1] then
    redis.call('DEL', KEYS[3])
  end
end
redis.call('SET', KEYS[1], lock_string(ARGV[1], '1', token, released, flag), 'PX', lease)
return tonumber(token)

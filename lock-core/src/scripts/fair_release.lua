-- fair_release: give back one hold of a fair lock; the last one frees it and wakes the head
-- of the queue (only the head: no herd).
--
-- KEYS[1]: the lock; KEYS[2]: the queue; KEYS[3]: the waiters' deadlines (see fair_acquire.lua)
-- ARGV[1]: owner id
-- ARGV[2]: the hold count the caller believes the owner has now (>= 1)
-- ARGV[3]: the hold's fencing token
-- ARGV[4]: the wake channel prefix: the head is woken on ARGV[4] .. <its owner id>
-- ARGV[5]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns as release.lua: 1 released, 2 one hold given back, 3 a repeat, 0 not held
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local owner, count, token, released, waiters =
  string.match(value, '^([^|]*)|(%d+)|(%d+)|(%d*)|(1?)$')
if not owner then
  return redis.error_reply('WRONGTYPE the lock key holds a value lock-core did not write')
end
count = tonumber(count)
local expected = tonumber(ARGV[2])
if owner == ARGV[1] then
  if count == expected then
    if count > 1 then
      redis.call('SET', KEYS[1],
        owner .. '|' .. (count - 1) .. '|' .. token .. '|' .. released .. '|' .. waiters, 'KEEPTTL')
      return 2
    end
    redis.call('SET', KEYS[1], '|0|' .. token .. '|' .. ARGV[3] .. '|', 'PX', ARGV[5])
    local t = redis.call('TIME')
    local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
    for _, waiter in ipairs(dead) do
      redis.call('ZREM', KEYS[2], waiter)
      redis.call('ZREM', KEYS[3], waiter)
    end
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if head then
      redis.call('PUBLISH', ARGV[4] .. head, ARGV[3])
    end
    return 1
  end
  if count == expected - 1 then
    return 3
  end
  return 0
end
if expected == 1 and released == ARGV[3] then
  return 3
end
return 0

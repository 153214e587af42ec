-- fair_acquire: take a fair lock in arrival order, or re-enter it, or queue for it.
--
-- KEYS[1]: the lock string
-- KEYS[2]: the queue, a sorted set: waiter owner id -> arrival (server clock, microseconds)
-- KEYS[3]: the waiters' deadlines, a sorted set: owner id -> expiry (server clock, ms)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the hold count the caller believes the owner has now (0 for a fresh acquisition)
-- ARGV[4]: how long the caller stays queued without calling again, in ms (0: do not queue)
--
-- Returns as acquire.lua: token > 0 taken; -2 - ms busy (ms: when to look again at the
-- latest); 0 the hold was lost. Waiters that stopped calling are dropped from the queue before
-- its head is read, so a dead waiter delays the others by at most its own deadline. A free lock
-- goes to the head of the queue only.
local t = redis.call('TIME')
local now = ms(t)
local lease = tonumber(ARGV[2])
local answer, value, owner, token, released, waiters =
  start_acquire(KEYS[1], ARGV[1], tonumber(ARGV[3]), lease)
if answer then
  return answer
end
-- An empty queue (the common case) has no waiter to drop.
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head then
  drop_dead_waiters(KEYS[2], KEYS[3], now)
  head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
end
local hint
if owner == '' then
  if not head or head == ARGV[1] then
    token = next_token(token, t)
    redis.call('SET', KEYS[1], lock_string(ARGV[1], '1', token, released, ''), 'PX', lease)
    if head then
      redis.call('ZREM', KEYS[2], ARGV[1])
      redis.call('ZREM', KEYS[3], ARGV[1])
    end
    return tonumber(token)
  end
  hint = math.max(1, tonumber(redis.call('ZSCORE', KEYS[3], head)) - now)
else
  hint = math.max(1, redis.call('PTTL', KEYS[1]))
end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  local arrival = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('ZADD', KEYS[2], 'NX', arrival, ARGV[1])
  redis.call('ZADD', KEYS[3], string.format('%.0f', now + ttl), ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ttl * 2)
  redis.call('PEXPIRE', KEYS[3], ttl * 2)
  hint = math.min(hint, ttl)
end
return -2 - hint

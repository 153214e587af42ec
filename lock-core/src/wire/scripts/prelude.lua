-- prelude: the helpers every script shares. It is put in front of each script when the
-- scripts are loaded, so the lock-string format is written once.
--
-- A lock string is "owner|count|token|released|waiters": the owner id ('' when free), its
-- hold count, the last fencing token issued, the token of the last full release ('' if
-- none), and '1' while someone waits for a release ('' otherwise). A held lock's key
-- expires with its lease; a free one keeps its counter for the client's fence_ttl.

-- The lock string's fields: owner, count, token, released, waiters.
local LOCK = '^([^|]*)|(%d+)|(%d+)|(%d*)|(1?)$'

-- Reads the lock string `value` (what GET answered). Returns value, owner, count, token,
-- released, waiters; for a missing key nil, '', 0, nil, '', ''; for a value this library did
-- not write, false.
local function parse_lock(value)
  if not value then
    return nil, '', 0, nil, '', ''
  end
  local owner, count, token, released, waiters = string.match(value, LOCK)
  if not owner then
    return false
  end
  return value, owner, tonumber(count), token, released, waiters
end

-- Reads the lock string at `key`; see parse_lock.
local function read_lock(key)
  return parse_lock(redis.call('GET', key))
end

-- The error for a key whose value this library did not write.
local function foreign()
  return redis.error_reply('WRONGTYPE the lock key holds a value lock-core did not write')
end

local function lock_string(owner, count, token, released, waiters)
  return owner .. '|' .. count .. '|' .. token .. '|' .. released .. '|' .. waiters
end

-- The server clock (a TIME reply) in milliseconds.
local function ms(t)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The server clock `t` (a TIME reply) in microseconds, as a token.
local function seed(t)
  local us = t[2]
  return t[1] .. string.rep('0', 6 - #us) .. us
end

-- The fencing token of a new holder: the last token + 1, or, for a key with no counter
-- (never used, or expired), the server clock `t` (a TIME reply, read if nil) in
-- microseconds. Every token is at most its issue time in microseconds (Redis runs fewer than
-- one script per microsecond), so tokens only grow as long as the server clock does not step
-- back by more than the time the key was gone.
local function next_token(token, t)
  if token then
    return string.format('%.0f', tonumber(token) + 1)
  end
  return seed(t or redis.call('TIME'))
end

-- Frees the lock string at `key`, whose last token is `last`: kept for `fence_ttl` ms as a
-- free lock with its counter and `released`, the token of this release (so a repeat of the
-- release is recognised).
local function free_string(key, last, released, fence_ttl)
  redis.call('SET', key, lock_string('', '0', last, released, ''), 'PX', fence_ttl)
end

-- The answer to "held by another owner": -2 - pttl, or -1 without an expiry. With
-- `will_wait` ('1') it sets the waiters flag, so the holder's release publishes.
local function busy(key, value, waiters, will_wait)
  if will_wait == '1' and waiters == '' then
    redis.call('SET', key, value .. '1', 'KEEPTTL')
  end
  local pttl = redis.call('PTTL', key)
  if pttl < 0 then
    return -1
  end
  return -2 - pttl
end

-- The owner takes a lock string it holds again: count + 1 when the caller's `expected`
-- count is the current one (the lease becomes at least `lease` ms), nothing when the count
-- is already one more (a repeat of an applied request). Returns the token, or 0 when the
-- count is neither (the hold was lost).
local function take_again(key, owner, count, token, released, waiters, expected, lease)
  if count == expected then
    local next = lock_string(owner, count + 1, token, released, waiters)
    if redis.call('PTTL', key) < tonumber(lease) then
      redis.call('SET', key, next, 'PX', lease)
    else
      redis.call('SET', key, next, 'KEEPTTL')
    end
  elseif count ~= expected + 1 then
    return 0
  end
  return tonumber(token)
end

-- The start of an acquisition of the lock string at `key` by `caller`, who believes it holds
-- `expected` holds: returns a final answer when there is one (an error for a foreign value;
-- take_again's answer when the caller owns it; 0 when the caller believes it holds the lock
-- but does not: the hold was lost). Otherwise nil, and the lock's value, owner ('' when
-- free), token, released and waiters for the caller to go on with.
local function start_acquire(key, caller, expected, lease)
  local value, owner, count, token, released, waiters = read_lock(key)
  if value == false then
    return foreign()
  end
  if owner == caller then
    return take_again(key, owner, count, token, released, waiters, expected, lease)
  end
  if expected ~= 0 then
    return 0
  end
  return nil, value, owner, token, released, waiters
end

-- Gives back one hold of the lock string at `key` held by `owner` with `expected` holds and
-- fencing token `token`. The last hold frees it (free_string).
-- Returns 1 freed, 2 one hold given back, 3 a repeat of a release already applied, 0 not
-- held, false for a foreign value; and, when freed, whether someone waits ('1' or '').
local function give_back(key, owner, expected, token, fence_ttl)
  local value, holder, count, last, released, waiters = read_lock(key)
  if value == false then
    return false
  end
  if not value then
    return 0
  end
  expected = tonumber(expected)
  if holder == owner then
    if count == expected then
      if count > 1 then
        redis.call('SET', key, lock_string(holder, count - 1, last, released, waiters), 'KEEPTTL')
        return 2
      end
      free_string(key, last, token, fence_ttl)
      return 1, waiters
    end
    if count == expected - 1 then
      return 3
    end
    return 0
  end
  if expected == 1 and released == token then
    return 3
  end
  return 0
end


-- Frees the lock string at `key` whoever holds it (free_string).
-- Returns 1 if a held lock was freed, 0 if it was free, false for a foreign value.
local function free_lock(key, fence_ttl)
  local value, owner, _, token, released = read_lock(key)
  if value == false then
    return false
  end
  if owner == '' then
    return 0
  end
  free_string(key, token, released, fence_ttl)
  return 1
end

-- Drops the fair waiters whose deadline (in `deadlines`, server ms) is before `now` from
-- `queue` and `deadlines`.
local function drop_dead_waiters(queue, deadlines, now)
  local dead = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now)
  for _, waiter in ipairs(dead) do
    redis.call('ZREM', queue, waiter)
    redis.call('ZREM', deadlines, waiter)
  end
end

-- Wakes the head of a fair queue, if any, with `message` on `prefix .. <its owner id>`,
-- after dropping the waiters that stopped calling (an empty queue, the common case, needs
-- neither).
local function wake_head(queue, deadlines, prefix, message)
  if not redis.call('ZRANGE', queue, 0, 0)[1] then
    return
  end
  drop_dead_waiters(queue, deadlines, ms(redis.call('TIME')))
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head then
    redis.call('PUBLISH', prefix .. head, message)
  end
end


-- acquire: take a mutex (a lock string), or re-enter it. `t`: a TIME reply to seed a new
-- counter from, and `fresh`, that seed as a token (nil: read when needed). Returns as
-- acquire.lua.
local function acquire_lock(key, caller, lease, expected, will_wait, t, fresh)
  if expected == '0' then
    -- The common case, a name nobody holds: taken by one SET NX (lock_string's format, with
    -- next_token's seed), which saves reading the key and several Lua calls.
    if not fresh then
      t = redis.call('TIME')
      fresh = seed(t)
    end
    if redis.call('SET', key, caller .. '|1|' .. fresh .. '||', 'NX', 'PX', lease) then
      return fresh
    end
  end
  local answer, value, owner, token, released, waiters =
    start_acquire(key, caller, tonumber(expected), lease)
  if answer then
    return answer
  end
  if owner ~= '' then
    return busy(key, value, waiters, will_wait)
  end
  token = next_token(token, t)
  redis.call('SET', key, lock_string(caller, '1', token, released, ''), 'PX', lease)
  return token
end

-- release: give back one hold of a lock string, publishing on `channel` when the lock is
-- freed and someone waits. Returns as release.lua.
local function release_lock(key, owner, expected, token, channel, fence_ttl)
  local value = redis.call('GET', key)
  if value and expected == '1' then
    -- The common case, the only hold of its owner, whose string starts with its owner id,
    -- count and token (lock_string's format): freed without parsing the rest, which saves
    -- several Lua calls per release.
    if string.find(value, owner .. '|1|' .. token .. '|', 1, true) == 1 then
      free_string(key, token, token, fence_ttl)
      if string.byte(value, -1) == 49 then -- '1'
        redis.call('PUBLISH', channel, token)
      end
      return 1
    end
  end
  local result, waiters = give_back(key, owner, expected, token, fence_ttl)
  if result == false then
    return foreign()
  end
  if waiters == '1' then
    redis.call('PUBLISH', channel, token)
  end
  return result
end

-- A rate limit's decision (GCRA) at `key`: see rate_limit.lua for the arguments (numbers
-- here) and the answer. `t`: a TIME reply.
local function rate_decide(key, interval, burst, n, t)
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tat = now
  local stored = redis.call('GET', key)
  if stored then
    local last, i, b = string.match(stored, '^(%d+)|(%d+)|(%d+)$')
    if not last then
      return redis.error_reply('WRONGTYPE the rate limit key holds a value lock-core did not write')
    end
    tat = math.max(tonumber(last), now)
    if interval == 0 then
      interval, burst = tonumber(i), tonumber(b)
    end
  elseif interval == 0 then
    return false
  end
  local window = burst * interval
  local allow_at = tat + math.max(n, 1) * interval - window
  if now < allow_at then
    local remaining = math.max(0, math.floor((now - (tat - window)) / interval))
    return {0, remaining, allow_at - now, tat - now, interval, burst}
  end
  if n > 0 then
    tat = tat + n * interval
    local value = string.format('%.0f|%.0f|%.0f', tat, interval, burst)
    redis.call('SET', key, value, 'PX', math.ceil((tat - now) / 1000))
  end
  return {1, math.floor((now - (tat - window)) / interval), 0, tat - now, interval, burst}
end

-- acquire: take a lock, or re-enter one this owner already holds.
--
-- KEYS[1]: the lock, a string "owner|count|token|released|waiters": owner id ('' when free),
--          hold count, last fencing token issued, token of the last full release ('' if none),
--          '1' when someone waits for a release ('' otherwise)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the hold count the caller believes the owner has now (0 for a fresh acquisition)
-- ARGV[4]: '1' if the caller will wait for a release when the lock is busy
--
-- Returns one integer (a table reply costs the server more):
--   token > 0     acquired; also the answer to a repeat of an acquisition already applied
--   -2 - pttl     held by another owner with pttl >= 0 ms of lease left
--   -1            held by another owner, with no expiry
--   0             the owner's hold count is neither ARGV[3] nor ARGV[3] + 1: the hold was lost
--
-- The token is the last one + 1, or, when the key is gone (never used, expired), the server
-- clock in microseconds. Every token is at most its issue time in microseconds (Redis runs
-- fewer than one script per microsecond) and a key is gone for at least a lease before it is
-- seeded again, so tokens only grow as long as the server clock does not step back by more
-- than that.
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
if owner == '' then
  if expected ~= 0 then
    return 0
  end
  if token then
    token = string.format('%.0f', tonumber(token) + 1)
  else
    local now = redis.call('TIME')
    token = now[1] .. string.format('%06d', tonumber(now[2]))
  end
  redis.call('SET', KEYS[1], ARGV[1] .. '|1|' .. token .. '|' .. released .. '|', 'PX', ARGV[2])
  return tonumber(token)
end
if owner ~= ARGV[1] then
  if expected ~= 0 then
    return 0
  end
  if ARGV[4] == '1' and waiters == '' then
    redis.call('SET', KEYS[1], value .. '1', 'KEEPTTL')
  end
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    return -1
  end
  return -2 - pttl
end
if count == expected then
  local next = owner .. '|' .. (count + 1) .. '|' .. token .. '|' .. released .. '|' .. waiters
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[1], next, 'PX', ARGV[2])
  else
    redis.call('SET', KEYS[1], next, 'KEEPTTL')
  end
elseif count ~= expected + 1 then
  return 0
end
return tonumber(token)

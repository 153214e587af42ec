-- sem_renew: reset the lease of every permit group in a batch that is still held.
--
-- KEYS[2i - 1], KEYS[2i]: the semaphore of the i-th group and its recorded size (see
-- sem_acquire.lua)
-- ARGV[1]: lease in milliseconds
-- ARGV[2i], ARGV[2i + 1]: owner id and permit count of the i-th group
--
-- Returns an array: 1 where every permit of the group was still held and was renewed, else 0
local now = ms(redis.call('TIME'))
local lease = tonumber(ARGV[1])
local expiry = string.format('%.0f', now + lease)
local out = {}
for i = 1, #KEYS / 2 do
  local key, size = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, n = ARGV[2 * i], tonumber(ARGV[2 * i + 1])
  local held = 1
  for k = 1, n do
    local score = redis.pcall('ZSCORE', key, owner .. ':' .. k)
    if type(score) ~= 'string' or tonumber(score) <= now then
      held = 0
      break
    end
  end
  if held == 1 then
    for k = 1, n do
      redis.call('ZADD', key, 'XX', expiry, owner .. ':' .. k)
    end
    if redis.call('PTTL', key) < lease then
      redis.call('PEXPIRE', key, lease)
    end
    redis.call('PEXPIRE', size, redis.call('PTTL', key))
  end
  out[i] = held
end
return out

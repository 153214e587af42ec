-- renew: reset the lease of every lock in a batch that its owner still holds.
--
-- KEYS[i]: the lock hash of the i-th lock (see acquire.lua)
-- ARGV[1]: lease in milliseconds
-- ARGV[i + 1]: owner id of the i-th lock
--
-- Returns an array: 1 where the owner still held KEYS[i] and its lease was reset, 0 where not
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('HGET', key, 'o') == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out

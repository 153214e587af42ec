-- renew: reset the lease of every lock string in a batch that its owner still holds (a lock
-- string of the scripts, or a lock of the native and hybrid protocols: the owner id itself).
--
-- KEYS[i]: the i-th lock string
-- ARGV[1]: lease in milliseconds
-- ARGV[i + 1]: owner id of the i-th lock
--
-- Returns an array: 1 where the owner still held KEYS[i] and its lease was reset, 0 where not.
-- A key of another type counts as not held instead of failing the whole batch.
local out = {}
for i, key in ipairs(KEYS) do
  local value = redis.pcall('GET', key)
  local prefix = ARGV[i + 1] .. '|'
  if type(value) == 'string'
    and (string.sub(value, 1, #prefix) == prefix or value == ARGV[i + 1]) then
    redis.call('PEXPIRE', key, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out

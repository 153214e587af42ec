-- rw_read_renew: reset the lease of every read share in a batch that is still held.
--
-- KEYS[i]: the readers hash of the i-th share (see rw_read.lua)
-- ARGV[1]: lease in milliseconds
-- ARGV[i + 1]: owner id of the i-th share
--
-- Returns an array: 1 where the share was still held and was renewed, 0 where not
local now = ms(redis.call('TIME'))
local lease = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local mine = redis.pcall('HGET', key, ARGV[i + 1])
  out[i] = 0
  if type(mine) == 'string' then
    local c, e = string.match(mine, '^(%d+)|(%d+)$')
    if c and tonumber(e) > now then
      redis.call('HSET', key, ARGV[i + 1], c .. '|' .. string.format('%.0f', now + lease))
      if redis.call('PTTL', key) < lease then
        redis.call('PEXPIRE', key, lease)
      end
      out[i] = 1
    end
  end
end
return out

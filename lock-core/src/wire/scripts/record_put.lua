-- record_put: write a record unless one of a greater fencing token is there.
--
-- KEYS[1]: the record
-- ARGV[1]: the value as stored (<token>:<bytes>)
-- ARGV[2]: the writer's fencing token
-- ARGV[3]: the record's time to live, in milliseconds
--
-- Returns -1 written, or the stored record's (greater) token: refused.
local stored = redis.call('GET', KEYS[1])
if stored then
  local token = string.match(stored, '^(%d+):')
  if not token then
    return redis.error_reply('WRONGTYPE the key does not hold a lock-core record')
  end
  if tonumber(token) > tonumber(ARGV[2]) then
    return tonumber(token)
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return -1

-- sem_release: give back a group of permits and wake waiters.
--
-- KEYS[1]: the semaphore (see sem_acquire.lua)
-- ARGV[1]: owner id
-- ARGV[2]: permit count of the group
-- ARGV[3]: the semaphore's release channel
--
-- Returns how many of the permits were still held (unexpired) until now
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local valid, removed = 0, 0
for k = 1, tonumber(ARGV[2]) do
  local member = ARGV[1] .. ':' .. k
  local score = redis.call('ZSCORE', KEYS[1], member)
  if score then
    if tonumber(score) > now then
      valid = valid + 1
    end
    removed = removed + redis.call('ZREM', KEYS[1], member)
  end
end
if removed > 0 then
  redis.call('PUBLISH', ARGV[3], '1')
end
return valid

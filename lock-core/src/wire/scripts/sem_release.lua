-- sem_release: give back a group of permits and wake waiters.
--
-- KEYS[1]: the semaphore (see sem_acquire.lua); KEYS[2]: its recorded size
-- ARGV[1]: owner id
-- ARGV[2]: permit count of the group
-- ARGV[3]: the semaphore's release channel
--
-- Returns how many of the permits were still held (unexpired) until now. The size record
-- goes with the last permit.
local now = ms(redis.call('TIME'))
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
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[2])
  end
  redis.call('PUBLISH', ARGV[3], '1')
end
return valid

-- rw_force_unlock: free a read-write lock whoever holds it (the writer and every read share),
-- and wake its waiters. The writer's fencing counter stays; a waiting writer's mark stays, so
-- the writer keeps its turn ahead of new readers.
--
-- KEYS[1]: the writer (a lock string); KEYS[2]: the readers
-- ARGV[1]: the lock's release channel
-- ARGV[2]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1 if the writer or a read share whose lease had not run out was freed, 0 if
-- nothing was held
local value, owner, _, token, released = read_lock(KEYS[1])
if value == false then
  return foreign()
end
local freed = 0
if owner ~= '' then
  redis.call('SET', KEYS[1], lock_string('', '0', token, released, ''), 'PX', ARGV[2])
  freed = 1
end
local now = ms(redis.call('TIME'))
local readers = redis.call('HGETALL', KEYS[2])
for i = 2, #readers, 2 do
  local expiry = tonumber(string.match(readers[i], '|(%d+)$'))
  if expiry and expiry > now then
    freed = 1
  end
end
if #readers > 0 then
  redis.call('DEL', KEYS[2])
end
if freed == 1 then
  redis.call('PUBLISH', ARGV[1], '0')
end
return freed

-- rw_read: take a read share of a read-write lock, or re-enter it.
--
-- KEYS[1]: the writer (see rw_write.lua); KEYS[2]: the readers; KEYS[3]: the writer-waiting mark
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the read count the caller believes the owner has now (0 for a fresh share)
-- ARGV[4]: '1' if the caller will wait when busy
--
-- Returns 1 taken (also the answer to a repeat of an applied call); -2 - ms busy (ms: when
-- to look again); -1 busy with no expiry; 0 the share was lost. A reader holds back while
-- another owner writes, or while a writer waits (unless it already reads, or is the writer
-- itself: a writer may take a read share and then give up writing, a downgrade).
local now = ms(redis.call('TIME'))
local expected = tonumber(ARGV[3])
local lease = tonumber(ARGV[2])
local mine = redis.call('HGET', KEYS[2], ARGV[1])
local count = 0
if mine then
  local c, expiry = string.match(mine, '^(%d+)|(%d+)$')
  if tonumber(expiry) > now then
    count = tonumber(c)
  end
end
if count == expected + 1 then
  return 1
end
if count ~= expected then
  return 0
end
local value, writer, _, _, _, waiters = read_lock(KEYS[1])
if value == false then
  return foreign()
end
if writer ~= '' and writer ~= ARGV[1] then
  return busy(KEYS[1], value, waiters, ARGV[4])
end
if expected == 0 and writer == '' then
  local waiting = redis.call('GET', KEYS[3])
  if waiting and waiting ~= ARGV[1] then
    return -2 - math.max(1, redis.call('PTTL', KEYS[3]))
  end
end
redis.call('HSET', KEYS[2], ARGV[1], (count + 1) .. '|' .. string.format('%.0f', now + lease))
if redis.call('PTTL', KEYS[2]) < lease then
  redis.call('PEXPIRE', KEYS[2], lease)
end
return 1

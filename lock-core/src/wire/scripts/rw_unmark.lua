-- rw_unmark: a writer that stopped waiting removes its writer-waiting mark and wakes the
-- readers it held back.
--
-- KEYS[1]: the writer-waiting mark (see rw_write.lua)
-- ARGV[1]: owner id
-- ARGV[2]: the lock's release channel
--
-- Returns 1 if the mark was the caller's and is gone, 0 otherwise
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '0')
  return 1
end
return 0

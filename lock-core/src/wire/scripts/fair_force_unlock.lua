-- fair_force_unlock: free a fair lock whoever holds it, and wake the head of its queue. The
-- fencing counter stays, and so does the queue: its waiters keep their turns.
--
-- KEYS[1]: the lock string; KEYS[2]: the queue; KEYS[3]: the waiters' deadlines
-- ARGV[1]: the wake channel prefix: the head is woken on ARGV[1] .. <its owner id>
-- ARGV[2]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns 1 if a held lock was freed, 0 if it was free
local freed = free_lock(KEYS[1], ARGV[2])
if freed == false then
  return foreign()
end
if freed == 1 then
  wake_head(KEYS[2], KEYS[3], ARGV[1], '0')
end
return freed

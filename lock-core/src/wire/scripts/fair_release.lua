-- fair_release: give back one hold of a fair lock; the last one frees it and wakes the head
-- of the queue (only the head: no herd).
--
-- KEYS[1]: the lock string; KEYS[2]: the queue; KEYS[3]: the waiters' deadlines
-- ARGV[1]: owner id
-- ARGV[2]: the hold count the caller believes the owner has now (>= 1)
-- ARGV[3]: the hold's fencing token
-- ARGV[4]: the wake channel prefix: the head is woken on ARGV[4] .. <its owner id>
-- ARGV[5]: how long a free lock keeps its fencing counter, in milliseconds
--
-- Returns as release.lua: 1 released, 2 one hold given back, 3 a repeat, 0 not held
local result = give_back(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[5])
if result == false then
  return foreign()
end
if result == 1 then
  wake_head(KEYS[2], KEYS[3], ARGV[4], ARGV[3])
end
return result

-- Turns JIT compilation off until the end of the batch's (implicit)
-- transaction, for the count statements that follow it (counts.go): the
-- planner's cost estimate of a capped count can pass jit_above_cost
-- (the limits and a recursive scan are estimated high), and compiling
-- the plan costs far more than the count itself.
SELECT set_config('jit', 'off', true)

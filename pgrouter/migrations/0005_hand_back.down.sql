-- Undoes version 5: the hand-back rule goes.
DROP FUNCTION IF EXISTS /*schema*/leaserouter_hand_back(integer, boolean);

-- Undoes version 1: drops the jobs table with every job, the fence table
-- with every fence, and both sequences (the next New seeds the token
-- sequence again above the clock and TokenFloor).
DROP TABLE IF EXISTS /*schema*/leaserouter_fences;
DROP TABLE IF EXISTS /*schema*/leaserouter_jobs;
DROP SEQUENCE IF EXISTS /*schema*/leaserouter_job_seq;
DROP SEQUENCE IF EXISTS /*schema*/leaserouter_token;

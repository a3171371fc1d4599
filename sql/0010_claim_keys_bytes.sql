-- idemd schema, version 10: the claims' primary key compares bytes. Applied by `idemctl migrate`
-- inside one transaction, after version 9.
--
-- A consumer name and a business key are identifiers: the claim asks only whether two are equal,
-- and no order of theirs means anything. Under the database's collation, every comparison in the
-- primary key's B-tree went through a language's rules: a database created with a locale (most
-- are: en_US.UTF-8, C.UTF-8, an ICU locale) made each claim cost about half as much again as
-- under "C". Measured on one connection, 60 transactions of 1,900 random keys into 500,000
-- claims each: 9.4 µs a key under the ICU collation en-US, 8.0 to 9.0 under libc's C.UTF-8, 6.0
-- to 6.6 under "C" (tests/bench/README.md, "Keys compared as bytes"). The duplicates' lookups
-- (idem.claims_of()) and the results stored with claims probe the same index.
--
-- Equality does not change: the collations a database can have by default are deterministic,
-- and under them two texts are equal only when their bytes are (a key written precomposed and
-- one written decomposed were two keys before, and still are). So the rebuilt primary key holds
-- exactly the claims it held. What changes is the order of `ORDER BY business_key`: bytes.
--
-- The columns keep their type, so the table is not rewritten; the primary key is rebuilt, with
-- the table locked meanwhile: about 2 s a million claims on the 2-core test machine. idemd
-- waits for it (its transactions retry). Comparing these columns with text of the database's
-- collation works as before; a handler that compares them with a column of its own declared
-- with another collation than the database's (and not "C") must now say which one the
-- comparison uses (`... = t.k COLLATE "C"`): Postgres does not choose between two.
ALTER TABLE idem.processed_messages
    ALTER COLUMN consumer TYPE text COLLATE "C",
    ALTER COLUMN business_key TYPE text COLLATE "C";

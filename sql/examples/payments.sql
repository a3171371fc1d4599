-- Example side-effect schema for the payments demo and tests.
--
-- The ledger deliberately has no unique constraint on payment_id: if anything applied a payment
-- twice, it would show here as two rows and a wrong balance, instead of being hidden by an error.
CREATE TABLE IF NOT EXISTS accounts (
    id       text   PRIMARY KEY,
    balance  bigint NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS ledger (
    id          bigserial   PRIMARY KEY,
    payment_id  text        NOT NULL,
    account     text        NOT NULL,
    amount      bigint      NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- The handlers, one file each (idemd's tests, benchmark and demo read them from there; the
-- manual idemd.yaml(5) and etc/idemd.yaml show the same text; a unit test checks the latter):
--
-- payments_row.sql, for handler.mode: row (run once per newly claimed payment, in the claim's
-- transaction). $1 business_key, $2 json:/account, $3 json:/amount. Returns the new balance,
-- stored as the claim's result.
--
-- payments_set.sql, for handler.mode: set (run once per transaction over every payment it
-- newly claimed). $1, $2, $3 are text[] of the same fields, one element per payment in the
-- order they are applied. It inserts the ledger rows in that order and adds each account's
-- sum once (GROUP BY account), locking the accounts in one order (ORDER BY account) so that
-- two workers cannot deadlock. It returns nothing, so no result is stored: a set handler that
-- returns rows of (business key, result) has them stored with the claims.

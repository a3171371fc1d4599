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

-- The handler: one statement, run once per newly claimed payment, in the claim's transaction.
-- $1 business_key, $2 json:/account, $3 json:/amount. Returns the new balance (stored as the
-- claim's result).
--
--   WITH l AS (INSERT INTO ledger (payment_id, account, amount) VALUES ($1, $2, $3::bigint))
--   INSERT INTO accounts (id, balance) VALUES ($2, $3::bigint)
--   ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance
--   RETURNING balance

-- idemd schema, version 8: a position names the log it is a position in (ARCHITECTURE.md "Where a
-- partition starts"). Applied by `idemctl migrate` inside one transaction, after version 7.
--
-- next_offset is an offset in one log: one Kafka cluster, one incarnation of the topic, read by
-- one consumer (claims namespace). A disaster recovery to a mirrored cluster (other offsets for
-- the same messages), a topic deleted and created again (offsets from 0 again) or a renamed
-- consumer changes one of those, and the position no longer means what it says. Each progress
-- row now records:
--   kafka_cluster  the Kafka cluster id the position is in (NULL: written before version 8, or
--                  the cluster could not be asked; the first batch that knows it records it);
--   log_epoch      how many times idemd found this partition's log replaced under this consumer
--                  (another cluster, a recreated topic): names the log in event ids;
--   first_offset   where this consumer's first start on this log began (a `latest` start is the
--                  end of the log then; a renamed consumer inherits its group's), the start of
--                  what a database that lost everything re-applies; NULL: not known (rows from
--                  before version 8);
--   group_id       the Kafka consumer group that read it: within one group, the rows of other
--                  consumers on the same partition are its earlier names (a route's topics are
--                  its own), and a renamed consumer continues after the furthest of them.
-- idemd writes the row when it decides a partition's start at assignment (a first start, a
-- renamed consumer, a replaced log), and names the same in the metadata of every offset it
-- commits ("idemd/2 db=... log=<cluster>:<epoch> consumer=... first=... next=...").
ALTER TABLE idem.partition_progress
    ADD COLUMN kafka_cluster text,
    ADD COLUMN log_epoch     integer NOT NULL DEFAULT 0,
    ADD COLUMN first_offset  bigint,
    ADD COLUMN group_id      text;

-- A reply's and a dead letter's event id names the message it answers by its offset; an offset
-- is unique only within one log. From this version, a partition whose log is known names it in
-- those ids (the cluster and the epoch); rows of before keep their ids (idem.log_of() is NULL
-- for them, and the ids are made as in version 7).
CREATE FUNCTION idem.log_of(consumer text, topic text, part integer)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT pp.kafka_cluster || ':' || pp.log_epoch::text FROM idem.partition_progress pp
    WHERE pp.consumer = log_of.consumer AND pp.topic = log_of.topic AND pp.partition = log_of.part
$$;

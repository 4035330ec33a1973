-- A schema change of the thesis' trips table, for the two schema lines of templates/trips.v1.yml and trips.v2.yml
-- (docs/schema-lines.md): a column added (seats, with a default) and one renamed (bags → luggage). Load it after
-- templates/trips.pg.sql. Idempotent: safe to load again.

ALTER TABLE trips ADD COLUMN IF NOT EXISTS seats integer NOT NULL DEFAULT 4;

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'trips' AND column_name = 'bags') THEN
    ALTER TABLE trips RENAME COLUMN bags TO luggage;
  END IF;
END $$;

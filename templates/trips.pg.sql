-- The thesis' example table (Table 4.3.x): a trip such as Växjö-Kalmar, two integer columns, createdAt/updatedAt.
-- Idempotent: safe to load again.

CREATE TABLE IF NOT EXISTS trips (
  -- Writable through the outbox: text UUID keys, so two offline devices never pick the same key.
  id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
  name        text NOT NULL,
  passengers  integer NOT NULL DEFAULT 0,
  bags        integer NOT NULL DEFAULT 0,
  "createdAt" timestamptz NOT NULL DEFAULT now(),
  "updatedAt" timestamptz NOT NULL DEFAULT now()
);

INSERT INTO trips (id, name, passengers, bags, "createdAt", "updatedAt") VALUES
  ('7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0001', 'Växjö-Kalmar', 0, 0, '2018-04-29 11:21:01+00', '2018-04-29 11:21:02+00'),
  ('7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0002', 'Kalmar-Öland', 2, 1, '2018-04-29 11:30:00+00', '2018-04-29 11:45:05+00'),
  ('7a1f6c1e-2d7b-4c55-9a7e-0c5d7e1b0003', 'Göteborg-Malmö', 1, 3, '2018-05-02 08:00:00+00', '2018-05-02 08:00:00+00')
ON CONFLICT (id) DO NOTHING;

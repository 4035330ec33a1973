-- Field notes with photos (templates/notes.yml): `photo` and `scan` hold the SHA-256 of an attachment, or NULL.
-- Idempotent: safe to load again.

CREATE TABLE IF NOT EXISTS notes (
  id          text PRIMARY KEY DEFAULT gen_random_uuid()::text,
  body        text NOT NULL,
  photo       text CHECK (photo ~ '^[0-9a-f]{64}$'),
  scan        text CHECK (scan ~ '^[0-9a-f]{64}$'),
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO notes (id, body, created_at, updated_at) VALUES
  ('b3c1d2e0-0000-4000-8000-000000000001', 'Gate at the north entrance sticks', '2026-11-20 08:00:00+00', '2026-11-20 08:00:00+00')
ON CONFLICT (id) DO NOTHING;

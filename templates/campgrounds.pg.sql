-- The book's campground finder (Whole Database Synchronization): campgrounds, their reviews and photos.
-- Idempotent: safe to load again. Types vary on purpose so the PostgreSQL → SQLite mapping shows
-- (see docs/templates.md): text, smallint, integer, bigint, double, numeric, boolean, date, timestamptz,
-- timestamp, text[], jsonb, uuid, bytea.

CREATE TABLE IF NOT EXISTS campgrounds (
  -- Writable through the outbox: text UUID keys, so two offline devices never pick the same key.
  id              text PRIMARY KEY DEFAULT gen_random_uuid()::text,
  name            text NOT NULL,
  description     text,
  lat             double precision NOT NULL,
  lon             double precision NOT NULL,
  -- The book's campground_tier: 0 = free, visible to everyone; > 0 = premium.
  tier            smallint NOT NULL DEFAULT 0,
  price_per_night numeric(8,2),
  has_water       boolean NOT NULL DEFAULT false,
  amenities       text[] NOT NULL DEFAULT '{}',
  details         jsonb,
  open_from       date,
  open_until      date,
  internal_notes  text,            -- never exported (template: exclude)
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS reviews (
  id             bigint PRIMARY KEY,
  campground_id  text NOT NULL REFERENCES campgrounds(id),
  rating         integer NOT NULL CHECK (rating BETWEEN 1 AND 5),
  author         varchar(80) NOT NULL,
  body           text,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS photos (
  id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  campground_id  text NOT NULL REFERENCES campgrounds(id),
  caption        text,
  width          integer NOT NULL,
  height         integer NOT NULL,
  thumbnail      bytea,
  taken_at       timestamp,        -- without time zone: exported as if UTC
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);

INSERT INTO campgrounds (id, name, description, lat, lon, tier, price_per_night, has_water, amenities, details, open_from, open_until, internal_notes, created_at, updated_at) VALUES
  ('0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e01', 'Pine Hollow', 'Shaded sites by a creek.', 44.4280, -110.5885, 0, 18.50, true,
   '{fire pits,toilets}', '{"sites": 42, "pets": true}', '2024-05-01', '2024-09-30', 'gate code 1234', '2024-01-10 09:00:00+00', '2024-03-01 12:30:00+00'),
  ('0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e02', 'AAA Deluxe Campground', 'Premium lakeside cabins and full hookups.', 46.8523, -121.7603, 1, 64.00, true,
   '{hookups,showers,wifi}', '{"sites": 12, "pets": false, "cabins": 6}', '2024-04-15', '2024-10-15', 'owner: Ann', '2024-01-11 10:00:00+00', '2024-01-11 10:00:00+00'),
  ('0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e03', 'Desert Star', 'Dark skies, no shade.', 36.5054, -117.0794, 0, 12.00, false,
   '{}', NULL, NULL, NULL, NULL, '2024-02-02 08:15:00+00', '2024-02-20 16:45:30.250+00'),
  ('0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e04', 'Fjällstugan', 'Mountain hut above the tree line — åäö welcome.', 63.4305, 13.0823, 2, 35.75, true,
   '{sauna,"drying room"}', '{"sites": 8, "languages": ["sv", "en"]}', '2024-06-15', '2024-09-01', NULL, '2024-03-05 07:00:00+00', '2024-03-05 07:00:00+00'),
  ('0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e05', 'Riverbend', NULL, 45.5231, -122.6765, 0, NULL, true,
   '{kayaks}', '{"sites": 30}', '2024-03-01', '2024-11-30', NULL, '2024-03-06 11:11:11+00', '2024-04-01 09:09:09+00')
ON CONFLICT (id) DO NOTHING;

INSERT INTO reviews (id, campground_id, rating, author, body, created_at, updated_at) VALUES
  (1, '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e01', 5, 'alice', 'Quiet and clean.', '2024-06-02 18:00:00+00', '2024-06-02 18:00:00+00'),
  (2, '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e01', 4, 'bob', 'Creek was cold!', '2024-06-10 07:30:00+00', '2024-06-10 07:30:00+00'),
  (3, '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e02', 5, 'carol', 'Worth the premium.', '2024-07-01 20:00:00+00', '2024-07-02 08:00:00+00'),
  (4, '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e03', 3, 'dave', 'Bring water.', '2024-04-04 12:00:00+00', '2024-04-04 12:00:00+00'),
  (5, '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e04', 5, 'elin', 'Bästa bastun i fjällen.', '2024-08-08 21:00:00+00', '2024-08-08 21:00:00+00'),
  (6, '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e05', 4, 'frank', NULL, '2024-05-05 05:05:05+00', '2024-05-05 05:05:05+00')
ON CONFLICT (id) DO NOTHING;

INSERT INTO photos (id, campground_id, caption, width, height, thumbnail, taken_at, created_at, updated_at) VALUES
  ('5f0e1d2c-3b4a-4958-8776-655443322101', '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e01', 'Creek at dawn', 1600, 1200, '\x89504e470d0a1a0a0000', '2024-06-02 05:12:00', '2024-06-02 19:00:00+00', '2024-06-02 19:00:00+00'),
  ('5f0e1d2c-3b4a-4958-8776-655443322102', '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e02', 'Cabin 3', 1024, 768, '\xffd8ffe000104a464946', '2024-07-01 17:45:00', '2024-07-01 21:00:00+00', '2024-07-01 21:00:00+00'),
  ('5f0e1d2c-3b4a-4958-8776-655443322103', '0b5c3a2e-6f1d-4a39-9d8e-1a2b3c4d5e04', 'Norrsken', 2048, 1365, NULL, NULL, '2024-08-09 01:00:00+00', '2024-08-09 01:00:00+00')
ON CONFLICT (id) DO NOTHING;

-- Access rights (the book's "Access Rights"; templates/campgrounds-tiered.yml): each user has an access tier
-- and an API token, stored only as its SHA-256 hex. A user of tier n sees campgrounds of tier <= n.
-- The demo tokens are 'alice-token' (free tier 0) and 'bob-token' (premium tier 2).
CREATE TABLE IF NOT EXISTS users (
  id                text PRIMARY KEY,
  name              text NOT NULL,
  access_tier       smallint NOT NULL DEFAULT 0,
  api_token_sha256  text UNIQUE
);

INSERT INTO users (id, name, access_tier, api_token_sha256) VALUES
  ('alice', 'Alice', 0, encode(sha256('alice-token'::bytea), 'hex')),
  ('bob',   'Bob',   2, encode(sha256('bob-token'::bytea), 'hex'))
ON CONFLICT (id) DO NOTHING;

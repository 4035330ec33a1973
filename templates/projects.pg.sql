-- Inspections by project (templates/projects.yml, docs/partitions.md): projects, their sites and the findings an
-- inspector records on a site, a checklist every inspector shares, and who works on which project.
-- Idempotent: safe to load again.

-- The partitions: one per project that is not archived.
CREATE TABLE IF NOT EXISTS projects (
  id          bigint PRIMARY KEY,
  name        text NOT NULL,
  client      text NOT NULL,
  archived    boolean NOT NULL DEFAULT false,   -- archived projects are not served (template: partition.values)
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Access rights (template: partition.access): who may read which project. A token is stored only as its SHA-256
-- hex; the table itself is never exported.
CREATE TABLE IF NOT EXISTS project_members (
  project_id    bigint NOT NULL REFERENCES projects(id),
  member        text NOT NULL,
  token_sha256  text NOT NULL,
  PRIMARY KEY (project_id, member)
);
CREATE INDEX IF NOT EXISTS project_members_token ON project_members (token_sha256);

-- The shared part: every device carries the whole checklist.
CREATE TABLE IF NOT EXISTS checklist_items (
  code        text PRIMARY KEY,
  title       text NOT NULL,
  category    text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Partitioned by project_id: a site lives in its project's partition and moves when project_id changes.
CREATE TABLE IF NOT EXISTS sites (
  id          bigint PRIMARY KEY,
  project_id  bigint NOT NULL REFERENCES projects(id),
  name        text NOT NULL,
  address     text,
  lat         double precision,
  lon         double precision,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS sites_project ON sites (project_id);

-- Follows its site (template: parent). Writable through the outbox: text UUID keys, so two offline devices never
-- pick the same key.
CREATE TABLE IF NOT EXISTS findings (
  id              text PRIMARY KEY DEFAULT gen_random_uuid()::text,
  site_id         bigint NOT NULL REFERENCES sites(id),
  checklist_code  text REFERENCES checklist_items(code),
  severity        smallint NOT NULL DEFAULT 1 CHECK (severity BETWEEN 1 AND 3),
  status          text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'fixed', 'accepted')),
  note            text NOT NULL DEFAULT '',
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS findings_site ON findings (site_id);

INSERT INTO checklist_items (code, title, category, created_at, updated_at) VALUES
  ('FIRE-01', 'Fire exits unobstructed and signed', 'fire', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('FIRE-02', 'Extinguishers inspected within 12 months', 'fire', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('FIRE-03', 'Fire doors close and latch', 'fire', '2026-01-05 08:00:00+00', '2026-03-02 10:15:00+00'),
  ('ELEC-01', 'Distribution boards locked and labelled', 'electrical', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('ELEC-02', 'No damaged cables or extension leads', 'electrical', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('ACC-01', 'Step-free access to the main entrance', 'access', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('ACC-02', 'Handrails on both sides of stairs', 'access', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('SITE-01', 'Perimeter fence intact, gates lockable', 'site', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('SITE-02', 'Scaffolding tagged and inspected this week', 'site', '2026-01-05 08:00:00+00', '2026-02-11 07:30:00+00'),
  ('SITE-03', 'Excavations barriered', 'site', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('ENV-01', 'Waste segregated; skips covered', 'environment', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00'),
  ('ENV-02', 'Spill kit on site — åäö labels legible', 'environment', '2026-01-05 08:00:00+00', '2026-01-05 08:00:00+00')
ON CONFLICT (code) DO NOTHING;

-- 36 projects: 1-30 active, 31-36 archived (no partition).
INSERT INTO projects (id, name, client, archived, created_at, updated_at)
SELECT g,
       (ARRAY['Harbour', 'Mill', 'Station', 'Library', 'Bridge', 'School'])[1 + (g - 1) % 6] || ' ' ||
       (ARRAY['North', 'South', 'East', 'West', 'Central', 'Old Town'])[1 + (g - 1) / 6] || ' renovation',
       (ARRAY['City of Växjö', 'Kalmar Läns Trafik', 'Region Öland', 'Byggbolaget AB'])[1 + g % 4],
       g > 30,
       timestamptz '2026-01-10 09:00:00+00' + g * interval '1 day',
       timestamptz '2026-01-10 09:00:00+00' + g * interval '1 day'
FROM generate_series(1, 36) g
ON CONFLICT (id) DO NOTHING;

-- Uneven sizes, as real projects are: project 1 has 12 sites, most have 2 to 5.
INSERT INTO sites (id, project_id, name, address, lat, lon, created_at, updated_at)
SELECT p * 100 + s, p, 'Site ' || p || '-' || s, s || ' Storgatan, block ' || p,
       56.8777 + p * 0.01 + s * 0.001, 14.8091 + p * 0.01 - s * 0.001,
       timestamptz '2026-01-10 10:00:00+00' + p * interval '1 day' + s * interval '1 minute',
       timestamptz '2026-01-10 10:00:00+00' + p * interval '1 day' + s * interval '1 minute'
FROM generate_series(1, 36) p,
     generate_series(1, CASE WHEN p = 1 THEN 12 WHEN p <= 3 THEN 6 ELSE 2 + p % 4 END) s
ON CONFLICT (id) DO NOTHING;

-- Two findings on every site; the first of each open, the second fixed.
INSERT INTO findings (id, site_id, checklist_code, severity, status, note, created_at, updated_at)
SELECT md5('finding-' || s.id || '-' || f)::uuid::text, s.id,
       (ARRAY['FIRE-01', 'FIRE-02', 'ELEC-01', 'ACC-02', 'SITE-02', 'ENV-01'])[1 + (s.id + f) % 6],
       1 + (s.id + f) % 3, CASE WHEN f = 1 THEN 'open' ELSE 'fixed' END,
       CASE WHEN f = 1 THEN 'Needs a follow-up visit' ELSE 'Fixed during the visit' END,
       s.created_at + f * interval '1 hour', s.created_at + f * interval '1 hour'
FROM sites s, generate_series(1, 2) f
ON CONFLICT (id) DO NOTHING;

-- The demo tokens: ana-token (projects 1, 2, 3), ben-token (2, 4, 5), cleo-token (6 and the archived 31).
INSERT INTO project_members (project_id, member, token_sha256)
SELECT m.project_id, m.member, encode(sha256((m.member || '-token')::bytea), 'hex')
FROM (VALUES (1, 'ana'), (2, 'ana'), (3, 'ana'), (2, 'ben'), (4, 'ben'), (5, 'ben'), (6, 'cleo'), (31, 'cleo'))
     AS m (project_id, member)
ON CONFLICT (project_id, member) DO NOTHING;

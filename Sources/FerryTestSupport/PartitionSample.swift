/// A small partitioned dataset for tests (docs/partitions.md): 4 projects (3 sites each, 2 findings per site), a
/// shared checklist, and members: `ana-token` may read projects 1, 2 and 99 (a key with no project), `ben-token`
/// project 3. ``template(access:)`` is the template over it.
public enum PartitionSample {
    public static let sql = """
        CREATE TABLE projects (id int PRIMARY KEY, name text NOT NULL, archived boolean NOT NULL DEFAULT false);
        CREATE TABLE sites (
            id int PRIMARY KEY, project_id int NOT NULL REFERENCES projects, name text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
        CREATE INDEX ON sites (project_id);
        CREATE TABLE findings (
            id int PRIMARY KEY, site_id int NOT NULL REFERENCES sites, note text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
        CREATE INDEX ON findings (site_id);
        CREATE TABLE checklist_items (id int PRIMARY KEY, label text NOT NULL);
        CREATE TABLE project_members (token_sha256 text NOT NULL, project_id int NOT NULL);
        INSERT INTO projects SELECT g, 'project ' || g FROM generate_series(1, 4) g;
        INSERT INTO sites (id, project_id, name) SELECT g, 1 + g % 4, 'site ' || g FROM generate_series(1, 12) g;
        INSERT INTO findings (id, site_id, note) SELECT g, 1 + g % 12, 'finding ' || g FROM generate_series(1, 24) g;
        INSERT INTO checklist_items SELECT g, 'item ' || g FROM generate_series(1, 5) g;
        INSERT INTO project_members VALUES
            (encode(sha256('ana-token'), 'hex'), 1), (encode(sha256('ana-token'), 'hex'), 2),
            (encode(sha256('ana-token'), 'hex'), 99), (encode(sha256('ben-token'), 'hex'), 3);
        """

    /// The template: projects are partitions (each holds its own row), sites by `project_id`, findings through their
    /// site (writable, newest wins), the checklist shared. With `access`, tokens read their projects only.
    public static func template(access: Bool = false) -> String {
        """
        dataset: projects
        partition:
          table: projects
          key: id
          values: "SELECT id FROM projects WHERE NOT archived"
        \(access ? "  access: \"SELECT project_id FROM project_members WHERE token_sha256 = $1\"\n" : "")\
        tables:
          - name: projects
            partition: id
          - name: sites
            partition: project_id
            writable: true
          - name: findings
            parent: { table: sites, column: site_id }
            writable: true
          - name: checklist_items

        """
    }
}

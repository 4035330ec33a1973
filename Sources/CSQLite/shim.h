// The session extension (sqlite3session_*, sqlite3changeset_*, sqlite3changegroup_*) is compiled into Debian's
// libsqlite3 and Apple's system SQLite; its declarations are only visible with these defined.
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>

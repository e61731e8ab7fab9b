package store

import "io/fs"

// mustSub is the migrations directory as goose reads it.
func mustSub() fs.FS {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		panic(err) // the directory is embedded: it exists
	}
	return sub
}

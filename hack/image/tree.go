package main

import (
	"archive/tar"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// readTree returns what the directory root holds, at any depth, as entries of a layer named
// by their path below root: its directories, regular files (a hard link is one more file)
// and symbolic links, which keep their target as written, so that a relative link still
// points beside itself and an absolute one into the image. Of the metadata only the mode
// is kept (permissions, setuid, setgid, sticky): every entry is owned by root, and its time
// is the layer's, so that two machines with the same files build the same layer. Anything
// else (a device, a socket, a pipe) is an error: an image has no use for one.
func readTree(root string) ([]entry, error) {
	info, err := os.Lstat(root)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		// Not followed if a link: the tree would then be whatever it points to today.
		return nil, fmt.Errorf("%s is a %s, not a directory", root, kind(info.Mode()))
	}
	var entries []entry
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		e, err := treeEntry(root, path, d)
		if err != nil {
			return err
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return entries, nil
}

// treeEntry is the entry of the file at path, which d describes, in the tree of root.
func treeEntry(root, path string, d fs.DirEntry) (entry, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return entry{}, err
	}
	name := filepath.ToSlash(rel)
	info, err := d.Info()
	if err != nil {
		return entry{}, err
	}
	mode := modeBits(info.Mode())
	switch t := d.Type(); {
	case t.IsDir():
		return dir(name, mode), nil
	case t.IsRegular():
		data, err := os.ReadFile(path)
		if err != nil {
			return entry{}, err
		}
		return file(name, mode, data), nil
	case t&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return entry{}, err
		}
		// 0777, as every link on Linux: its mode is never used.
		return entry{name: name, typ: tar.TypeSymlink, mode: 0o777, link: target}, nil
	default:
		return entry{}, fmt.Errorf("%s is a %s: want only directories, regular files and symbolic links", path, kind(t))
	}
}

// modeBits is the Unix mode of m that a tar header holds: its permissions and its setuid,
// setgid and sticky bits, whose places fs.FileMode does not share.
func modeBits(m fs.FileMode) int64 {
	bits := int64(m.Perm())
	for flag, bit := range map[fs.FileMode]int64{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if m&flag != 0 {
			bits |= bit
		}
	}
	return bits
}

// kind names the type of a file of mode m, for an error.
func kind(m fs.FileMode) string {
	switch t := m.Type(); {
	case t.IsRegular():
		return "regular file"
	case t&fs.ModeSymlink != 0:
		return "symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "named pipe"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device"
	default:
		return "file of type " + t.String()
	}
}

package client

import "regexp"

// templateName is the spec's TemplateName pattern (hostd/api/openapi.yaml;
// TestTemplateNamePatternIsTheSpecs keeps them one).
var templateName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// IsTemplateName reports whether name can name a template: hostd refuses
// any other name (400), so a caller that asks "is this a template?" of a
// name that is not one, an image reference say, knows the answer.
func IsTemplateName(name string) bool { return templateName.MatchString(name) }

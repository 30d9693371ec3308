package quickstart

import (
	"testing"

	"github.com/zmesh/zmesh/config"
)

// TestQuickstartConfigsValidate checks that the files the quickstart writes pass validate,
// which refuses unknown keys: no key of them is a typo or a key zmesh does not read.
func TestQuickstartConfigsValidate(t *testing.T) {
	t.Parallel()
	env := func(name string) (string, bool) { return "s3cret-pass", name == PasswordEnv }
	p := Ports{Offset: 7}
	_, warns, err := config.ParseController("/q/"+ControllerFile, []byte(controllerYAML(p)), env)
	if warns, err = config.Strict(warns, err); err != nil || len(warns) > 0 {
		t.Errorf("controller file: warnings %v, errors %v", warns, err)
	}
	for i := range MaxRouters {
		_, warns, err := config.ParseRouter("/q/router/"+RouterConfigFile, []byte(routerYAML(p, i)), env)
		if _, err = config.Strict(warns, err); err != nil {
			t.Errorf("router %d file: %v", i, err)
		}
	}
}

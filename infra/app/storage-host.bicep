// The Functions host's own storage (AzureWebJobsStorage) and the Flex Consumption deployment
// package container. It is kept apart from the vault account on purpose: the host keeps
// function keys, leases and timers here, and whoever is granted read access to the vault
// (e.g. a Synapse workspace with Storage Blob Data Reader) must not be able to read those.

@description('Name of the host storage account (3-24 lowercase letters and digits).')
@minLength(3)
@maxLength(24)
param name string

@description('Azure region of the account.')
param location string

@description('Tags applied to the account.')
param tags object

@description('Reachable only through private endpoints (vnetEnabled): public network access off.')
param privateOnly bool

@description('Blob container that holds the app package deployed by azd (Flex Consumption).')
param deploymentContainerName string

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    accessTier: 'Hot'
    isHnsEnabled: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    // Keyless: Entra ID (RBAC) only.
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    allowBlobPublicAccess: false
    allowCrossTenantReplication: false
    publicNetworkAccess: privateOnly ? 'Disabled' : 'Enabled'
    networkAcls: {
      // Isolated: no exception for "trusted Azure services" either; the app comes in
      // through its private endpoints.
      bypass: privateOnly ? 'None' : 'AzureServices'
      defaultAction: privateOnly ? 'Deny' : 'Allow'
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

output name string = account.name
output id string = account.id
output blobEndpoint string = account.properties.primaryEndpoints.blob
output deploymentContainerName string = deploymentContainer.name
